"""A collection whose index is an in-memory edit of a real one, read through the ordinary `Retriever`.

Two users: the classifier's fault injectors (`ragloop.improve.faults`: documents removed or cut at
chosen offsets) and the re-chunk remediation's preview (`ragloop.retrieval.rechunk.preview_rechunk`:
the index as it would be after re-chunking one document, measured before anything is written).
BM25 is rebuilt over the edited chunk list and the vectors go into an exact index, so building one
costs O(chunks) time and a copy of the vectors; past a few hundred thousand chunks a preview would
patch the base's indexes instead of rebuilding them. Writes nothing: `registry` is the base's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ragloop.config.pipeline import LexicalConfig
from ragloop.ingest.registry import Registry
from ragloop.ingest.types import Chunk
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.dense import make_vector_index
from ragloop.retrieval.lexical import BM25Index
from ragloop.retrieval.store import IndexGeneration, index_text


class DerivedCollection(Collection):
    """`base` with its chunk list replaced; reads like any collection, writes nothing."""

    def __init__(self, name: str, base: Collection, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        super().__init__(name, base.settings)
        self.base = base
        src = base.load()
        m = src.manifest
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if len(chunks) != len(vectors):
            raise ValueError(f"{len(chunks)} chunks but {len(vectors)} vectors")
        bm25 = BM25Index(LexicalConfig.model_validate(m.lexical))
        bm25.build([index_text(c, m.index_headings) for c in chunks])
        index = make_vector_index("exact", m.dim)
        if len(chunks):
            index.add(vectors)
        manifest = dataclasses.replace(m, n_chunks=len(chunks), dense_backend="exact")
        self._gen = IndexGeneration(
            src.path.with_name(f"{src.path.name}+{name}"), manifest, list(chunks), vectors, bm25, index
        )

    @property
    def registry(self) -> Registry:
        return self.base.registry

    def exists(self) -> bool:
        return True

    def generation(self) -> int:
        return self._gen.manifest.generation

    def load(self) -> IndexGeneration:
        return self._gen
