"""Typed retrieval results: every hit carries the scores and ranks of each stage it went through."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Stage = Literal["bm25", "dense", "fusion", "rerank", "mmr", "pinned"]
Mode = Literal["bm25", "dense", "hybrid"]


@dataclass
class Hit:
    chunk_id: str
    doc_id: str
    text: str
    heading_path: tuple[str, ...]
    title: str
    score: float
    rank: int
    scores: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "title": self.title,
            "heading_path": list(self.heading_path),
            "score": round(float(self.score), 6),
            "scores": {k: round(float(v), 6) for k, v in self.scores.items()},
            "ranks": dict(self.ranks),
            "text": self.text,
        }
