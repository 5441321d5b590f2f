"""Fault injectors: edited collections read like real ones; the query noise is deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from ragloop.improve.faults import NoisyQueryEmbedder, rechunked, without_documents
from ragloop.models.embedding import HashedEmbedder
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever
from tests.agent.conftest import HASHED

pytestmark = pytest.mark.usefixtures("kb_backend")  # embedded files and PostgreSQL


def test_without_documents_drops_every_chunk_of_them(coll: Collection) -> None:
    gap = without_documents(coll, ["bridge.md", "ferry.md"], "kb.gap")
    assert {c.doc_id for c in gap.load().chunks} == {"tower.md", "guide/trams.md"}
    hits = Retriever(gap, HASHED.retrieval).retrieve("Zorblat Bridge completed", 10)
    assert hits and {h.doc_id for h in hits} <= {"tower.md", "guide/trams.md"}
    # the base is untouched
    assert len(coll.load().chunks) == 4
    assert gap.generation() == coll.generation() and gap.exists()


def test_rechunked_splits_a_document_in_two_and_embeds_only_the_new_chunks(coll: Collection) -> None:
    gen = coll.load()
    text = next(c.text for c in gen.chunks if c.doc_id == "ferry.md")
    cut = text.index("ferry service")
    calls: list[int] = []

    class Counting(HashedEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            calls.append(len(texts))
            return super().embed(texts)

    cut_coll = rechunked(coll, {"ferry.md": (text, cut)}, Counting(), "kb.cut")
    parts = [c for c in cut_coll.load().chunks if c.doc_id == "ferry.md"]
    assert [p.text for p in parts] == [text[:cut].strip(), text[cut:].strip()]
    assert [p.ordinal for p in parts] == [0, 1]
    assert calls == [2]
    assert len(cut_coll.load().chunks) == 5
    hits = Retriever(cut_coll, HASHED.retrieval).retrieve("When did the ferry service end?", 3)
    assert parts[1].chunk_id in {h.chunk_id for h in hits}
    # vectors of untouched chunks are carried over as they were
    old = {c.chunk_id: gen.vectors[i] for i, c in enumerate(gen.chunks)}
    new = cut_coll.load()
    for i, c in enumerate(new.chunks):
        if c.chunk_id in old:
            assert np.array_equal(new.vectors[i], old[c.chunk_id])


def test_rechunked_rejects_a_cut_outside_the_text(coll: Collection) -> None:
    with pytest.raises(ValueError, match="outside"):
        rechunked(coll, {"ferry.md": ("short", 9)}, HashedEmbedder(), "kb.bad")
    with pytest.raises(ValueError, match="not in collection"):
        rechunked(coll, {"nope.md": ("some text", 2)}, HashedEmbedder(), "kb.bad")


def test_noisy_query_embedder_perturbs_queries_only_and_repeats() -> None:
    inner = HashedEmbedder(64)
    noisy = NoisyQueryEmbedder(inner, sigma=1.0, salt=3)
    q = "When was the Zorblat Bridge completed?"
    a, b = noisy.embed_one(q), noisy.embed_one(q)
    assert np.array_equal(a, b)
    assert abs(float(np.linalg.norm(a)) - 1.0) < 1e-5
    clean = inner.embed_one(q)
    assert float(a @ clean) < 0.95
    assert np.array_equal(noisy.embed([q]), inner.embed([q]))
    other_salt = NoisyQueryEmbedder(inner, sigma=1.0, salt=4).embed_one(q)
    assert not np.array_equal(a, other_salt)
    assert np.allclose(NoisyQueryEmbedder(inner, sigma=0.0).embed_one(q), clean, atol=1e-6)
