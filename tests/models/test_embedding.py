"""The embedders: the real ONNX MiniLM (no torch) and the hashed test double."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ragloop.models.embedding as emb
from ragloop.config import Settings
from ragloop.models import CachedEmbedder, make_embedder
from ragloop.models.errors import ModelIntegrityError, UnknownModelError


@pytest.fixture(scope="module")
def minilm() -> emb.OnnxMiniLMEmbedder:
    return emb.OnnxMiniLMEmbedder(threads=2)


def test_minilm_vectors_are_normalised_and_semantic(minilm: emb.OnnxMiniLMEmbedder) -> None:
    v = minilm.embed(
        [
            "How do I list all files in a directory tree?",
            "os.walk generates the file names in a directory tree.",
            "The quarterback threw three touchdown passes in the final.",
        ]
    )
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3


def test_minilm_batching_does_not_change_vectors(minilm: emb.OnnxMiniLMEmbedder) -> None:
    texts = ["short", "a somewhat longer sentence about pathlib and files " * 3, "", "mid length text here"]
    together = minilm.embed(texts)
    alone = np.stack([minilm.embed([t])[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-4)
    assert not together[2].any()  # empty text -> zero vector, never a made-up direction


def test_minilm_truncates_long_inputs(minilm: emb.OnnxMiniLMEmbedder) -> None:
    long = "alpha beta gamma " * 2000
    assert np.allclose(minilm.embed([long]), minilm.embed([long + " omega " * 50]), atol=1e-5)


def test_minilm_refuses_a_file_with_the_wrong_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emb, "MINILM_SHA256", "0" * 64)
    with pytest.raises(ModelIntegrityError, match="does not match"):
        emb.OnnxMiniLMEmbedder()


def test_hashed_embedder_is_deterministic_and_lexical() -> None:
    a, b = emb.HashedEmbedder(64), emb.HashedEmbedder(64)
    x = a.embed(["os.walk the tree", "walk the tree with os.walk", "unrelated socket text"])
    assert np.array_equal(x, b.embed(["os.walk the tree", "walk the tree with os.walk", "unrelated socket text"]))
    assert x[0] @ x[1] > x[0] @ x[2]


def test_cache_returns_identical_vectors_and_counts(tmp_path: Path) -> None:
    inner = emb.HashedEmbedder(32)
    cached = CachedEmbedder(inner, tmp_path / "c.sqlite")
    first = cached.embed(["a b", "c d", "a b"])
    assert (cached.hits, cached.misses) == (0, 2)
    second = CachedEmbedder(inner, tmp_path / "c.sqlite").embed(["c d", "a b"])
    assert np.array_equal(second, first[[1, 0]])
    cached.close()


def test_make_embedder_names() -> None:
    assert make_embedder("test:hashed-16", Settings()).dim == 16
    with pytest.raises(UnknownModelError, match="unknown embedder"):
        make_embedder("nope:model", Settings())
