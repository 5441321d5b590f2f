"""Typed units that flow through ingestion: loaded documents, their blocks, and chunks."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

BlockKind = Literal["text", "code", "list", "table"]


@dataclass(frozen=True)
class Block:
    """A structural unit of a document. Chunking never splits inside a `code` block."""

    text: str
    heading_path: tuple[str, ...] = ()
    kind: BlockKind = "text"


@dataclass(frozen=True)
class LoadedDocument:
    """One logical document. `doc_id` is the file's path relative to the ingested root
    (for JSONL records: `path#record-id`), with forward slashes on every platform."""

    doc_id: str
    title: str
    blocks: tuple[Block, ...]
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks)


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    doc_id: str
    ordinal: int
    text: str
    heading_path: tuple[str, ...] = ()
    title: str = ""
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return text_hash(self.text)

    def to_json(self) -> dict[str, object]:
        return {
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "ordinal": self.ordinal,
            "text": self.text,
            "heading_path": list(self.heading_path),
            "title": self.title,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> Chunk:
        return cls(
            chunk_id=str(d["chunk_id"]),
            doc_id=str(d["doc_id"]),
            ordinal=int(d["ordinal"]),  # type: ignore[call-overload]
            text=str(d["text"]),
            heading_path=tuple(d.get("heading_path") or ()),  # type: ignore[arg-type]
            title=str(d.get("title") or ""),
            metadata=dict(d.get("metadata") or {}),  # type: ignore[call-overload]
        )


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_chunk_id(doc_id: str, text: str, seen: dict[str, int]) -> str:
    """Stable id: the same text in the same document keeps its id across re-ingests, wherever it
    moves; identical texts within one document are told apart by their order of appearance."""
    base = hashlib.sha256(f"{doc_id}\x00{text}".encode()).hexdigest()[:16]
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


class LoaderError(Exception):
    """A file that cannot be turned into documents; the ingest run skips it and counts it."""
