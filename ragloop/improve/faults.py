"""Fault injectors for measuring the classifier: edited collections and a perturbed query embedder.

Each injects one known cause of failure into an otherwise real pipeline, so the labelled set's
label is the mechanism, not anyone's judgement:

- `without_documents` / `rechunked`: a `DerivedCollection` (`ragloop.retrieval.derived`) whose index
  is an in-memory edit of a real one (documents removed, documents cut at chosen offsets). Only the
  cut texts are embedded (through the base's embedder and its content-hash cache). It is read
  through the ordinary `Retriever`, exactly like the collection it came from.
- `NoisyQueryEmbedder`: the index's own embedder with deterministic Gaussian noise added to
  every *query* vector (seeded by the text's sha256, so runs repeat), the "query vector lands
  far from the relevant chunks" of an embedding failure.

Evaluation tooling only: nothing on the serving path builds these.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from ragloop.ingest.types import Chunk, make_chunk_id
from ragloop.models.embedding import Embedder
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.derived import DerivedCollection
from ragloop.retrieval.store import index_text


def without_documents(base: Collection, doc_ids: Sequence[str], name: str) -> DerivedCollection:
    """`base` minus every chunk of `doc_ids` (the knowledge-gap injector)."""
    gen = base.load()
    gone = set(doc_ids)
    keep = [i for i, c in enumerate(gen.chunks) if c.doc_id not in gone]
    return DerivedCollection(name, base, [gen.chunks[i] for i in keep], np.asarray(gen.vectors)[keep])


def rechunked(
    base: Collection, cuts: Mapping[str, tuple[str, int]], embedder: Embedder, name: str
) -> DerivedCollection:
    """`base` with each document of `cuts` (doc id -> (its text, offset)) replaced by exactly two
    chunks, `text[:offset]` and `text[offset:]`, without overlap, at the document's place (the
    chunking-failure injector). The new chunks keep the first old chunk's headings and metadata."""
    gen = base.load()
    m = gen.manifest
    chunks: list[Chunk] = []
    new_rows: list[int] = []
    vectors: list[np.ndarray | None] = []
    done: set[str] = set()
    for i, c in enumerate(gen.chunks):
        if c.doc_id not in cuts:
            chunks.append(c)
            vectors.append(np.asarray(gen.vectors[i]))
            continue
        if c.doc_id in done:
            continue
        done.add(c.doc_id)
        text, offset = cuts[c.doc_id]
        if not 0 < offset < len(text):
            raise ValueError(f"cut {offset} is outside the {len(text)} characters of {c.doc_id}")
        seen: dict[str, int] = {}
        for ordinal, part in enumerate((text[:offset].strip(), text[offset:].strip())):
            chunk_id = make_chunk_id(c.doc_id, part, seen)
            chunks.append(Chunk(chunk_id, c.doc_id, ordinal, part, c.heading_path, c.title, dict(c.metadata)))
            new_rows.append(len(vectors))
            vectors.append(None)
    missing = sorted(set(cuts) - done)
    if missing:
        raise ValueError(f"not in collection {base.name!r}: {', '.join(missing[:5])}")
    fresh = (
        embedder.embed([index_text(chunks[r], m.index_headings) for r in new_rows])
        if new_rows
        else np.zeros((0, m.dim))
    )
    for r, v in zip(new_rows, fresh, strict=True):
        vectors[r] = np.asarray(v)
    matrix = np.stack([v for v in vectors if v is not None]) if chunks else np.zeros((0, m.dim), np.float32)
    return DerivedCollection(name, base, chunks, matrix)


def _seed(text: str, salt: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{salt}\x00{text}".encode()).digest()[:8], "little")


class NoisyQueryEmbedder(Embedder):
    """`inner` plus noise of norm `sigma` (relative to the unit query vector), renormalised.

    Only `embed_one` (the retriever's query path) is perturbed; `embed` (passages, sentences,
    whatever a scorer or reranker embeds) passes through untouched."""

    def __init__(self, inner: Embedder, sigma: float, salt: int = 0) -> None:
        self.inner = inner
        self.sigma = sigma
        self.salt = salt
        self.dim = inner.dim
        self.name = inner.name

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def embed_one(self, text: str) -> np.ndarray:
        v = np.asarray(self.inner.embed([text])[0], dtype=np.float64)
        rng = np.random.default_rng(_seed(text, self.salt))
        noise = rng.standard_normal(v.shape)
        noise *= self.sigma / max(float(np.linalg.norm(noise)), 1e-12)
        out = v + noise
        norm = np.linalg.norm(out)
        return (out / norm if norm > 0 else out).astype(np.float32)
