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


def test_embed_many_matches_single_text_embedding(
    minilm: emb.OnnxMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest embeds length-sorted slices; each vector must still be the one the text gets alone
    (cosine >= 0.9999): padding is masked, only float summation order may differ."""
    monkeypatch.setattr(emb, "EMBED_SLICE", 5)  # several slices without a large corpus
    words = ["the", "os", "module", "walks", "directory", "trees", "and", "pathlib", "joins", "paths", "for", "files"]
    texts = [" ".join(words[: 1 + (i * 7) % len(words)]) + f" number {i}" for i in range(14)]
    texts += ["x", "", "Return a list of the entries in the directory given by path. " * 40]
    texts += [texts[3], texts[-1]]  # duplicates share one embedding
    many = minilm.embed_many(texts)
    alone = np.stack([minilm.embed([t])[0] for t in texts])
    assert many.shape == (len(texts), 384) and not many[15].any()
    live = [i for i, t in enumerate(texts) if t]
    cos = (many[live] * alone[live]).sum(axis=1)
    assert cos.min() >= 0.9999, cos.min()


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


def test_cached_embed_many_restores_order_and_reports_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emb, "EMBED_SLICE", 2)
    inner = emb.HashedEmbedder(32)
    cached = CachedEmbedder(inner, tmp_path / "c.sqlite")
    cached.embed(["bb bb"])  # one text already cached
    seen: list[tuple[int, int]] = []
    texts = ["ccc ccc ccc", "a", "bb bb", "a", "dddd dddd dddd dddd", "e e"]
    got = cached.embed_many(texts, lambda done, total: seen.append((done, total)))
    assert np.array_equal(got, inner.embed(texts))
    assert (cached.hits, cached.misses) == (1, 5)  # 1 + 4 distinct misses ("a" twice counts once)
    assert seen == [(3, 5), (5, 5)]  # distinct texts, the cached one counted done from the start
    again = CachedEmbedder(inner, tmp_path / "c.sqlite")
    assert np.array_equal(again.embed_many(texts), got) and again.misses == 0
    cached.close()
    again.close()


def test_make_embedder_names() -> None:
    assert make_embedder("test:hashed-16", Settings()).dim == 16
    with pytest.raises(UnknownModelError, match="unknown embedder"):
        make_embedder("nope:model", Settings())


def test_token_batches_respect_the_text_and_token_caps() -> None:
    ids = {i: [0] * n for i, n in enumerate([3, 3, 3, 3, 3, 10, 10, 40, 300])}
    batches = emb.token_batches(list(ids), ids, most=4, budget=40)
    assert batches == [[0, 1, 2, 3], [4, 5, 6], [7], [8]]  # 4 texts; 3 x 10 <= 40 < 4 x 10; 300 alone
    assert [i for b in batches for i in b] == list(ids)


def test_parallel_sessions_match_single_text_vectors_in_input_order(minilm: emb.OnnxMiniLMEmbedder) -> None:
    """Two single-threaded sessions on token-budget batches (the ingest path) give every text the
    vector it gets alone, row i for text i, whatever the input order."""
    assert len(minilm._sessions) == 2
    words = ["the", "os", "module", "walks", "directory", "trees", "and", "pathlib", "joins", "paths", "for", "files"]
    texts = [" ".join(words[: 1 + i % len(words)]) + f" item {i}" for i in range(40)]
    texts += ["Return a list of the entries in the directory given by path. " * k for k in (5, 12, 40)] * 3
    rng = np.random.default_rng(0)
    texts = [texts[i] for i in rng.permutation(len(texts))]
    got = minilm.embed(texts)
    ids = {i: e.ids for i, e in enumerate(minilm._tok.encode_batch(texts))}
    order = sorted(ids, key=lambda i: len(ids[i]))
    assert len(emb.token_batches(order, ids, minilm.batch_size, emb.BATCH_TOKENS)) > 4  # both sessions busy
    alone = np.stack([minilm.embed([t])[0] for t in texts])
    assert np.abs(got - alone).max() < 1e-5, np.abs(got - alone).max()
    assert np.allclose(minilm.embed(texts[::-1]), got[::-1], atol=1e-5)
