"""Reranking behind one small interface.

No cross-encoder weights exist offline (MODELS.md), so the default reranker reads at sentence
granularity with the bi-encoder: a passage is as relevant as its best sentence. That recovers
passages whose one answering sentence is diluted in a long chunk's mean-pooled vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ragloop.models.embedding import Embedder
from ragloop.models.errors import UnknownModelError
from ragloop.text.sentences import split_sentences


class Reranker(Protocol):
    name: str

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """One relevance score per text, higher is better, comparable across queries."""
        ...


class SentenceMaxSimReranker:
    name = "embedding:sentence-maxsim"

    def __init__(self, embedder: Embedder, max_sentences: int = 24) -> None:
        self.embedder = embedder
        self.max_sentences = max_sentences

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        sentences: list[str] = []
        owner: list[int] = []
        for i, t in enumerate(texts):
            for s in split_sentences(t)[: self.max_sentences]:
                sentences.append(s)
                owner.append(i)
        vecs = self.embedder.embed([query, *sentences])  # one batched call for the whole pool
        sims = vecs[1:] @ vecs[0]
        out = np.full(len(texts), -1.0, dtype=np.float32)
        np.maximum.at(out, np.asarray(owner, dtype=np.int64), sims.astype(np.float32))
        return out


def make_reranker(name: str, embedder: Embedder) -> Reranker:
    if name == SentenceMaxSimReranker.name:
        return SentenceMaxSimReranker(embedder)
    raise UnknownModelError(f"unknown reranker {name!r}; known: {SentenceMaxSimReranker.name}")
