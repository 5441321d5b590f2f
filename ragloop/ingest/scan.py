"""Work out what an ingest run must change, reading as little as possible.

A file whose size, mtime and chunking fingerprint match the registry is not even opened, so a
no-change re-ingest of thousands of files costs one `stat` each. A file whose stat changed is
hashed; only a changed hash (or changed chunking) loads and re-chunks it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ragloop.config.pipeline import ChunkingConfig
from ragloop.ingest.chunking import chunk_document
from ragloop.ingest.loaders import is_supported, load_file
from ragloop.ingest.registry import FileRecord
from ragloop.ingest.types import Chunk, LoadedDocument, LoaderError

ChangeKind = Literal["new", "changed", "unchanged", "deleted", "skipped"]
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".tox", ".mypy_cache"}


@dataclass
class FileChange:
    rel: str
    kind: ChangeKind
    root: str = ""
    record: FileRecord | None = None
    chunks: list[Chunk] = field(default_factory=list)
    error: str = ""
    touched: bool = False  # unchanged content, new stat: the registry row needs refreshing


@dataclass
class IngestPlan:
    changes: list[FileChange]
    ignored: int = 0

    def of_kind(self, *kinds: ChangeKind) -> list[FileChange]:
        return [c for c in self.changes if c.kind in kinds]

    @property
    def has_changes(self) -> bool:
        return any(c.kind in ("new", "changed", "deleted") for c in self.changes)


def chunk_fingerprint(chunking: ChunkingConfig, rel: str, index_fingerprint: str) -> str:
    """What the file's chunks depend on: its size/overlap and any override naming one of its
    records (`rel#record`, see `ChunkingConfig.for_record`). A file without record overrides keeps
    the fingerprint it always had, so adding them re-chunks nothing else."""
    size, overlap = chunking.for_document(rel)
    raw = f"{index_fingerprint}|{size}|{overlap}|{chunking.min_size}"
    prefix = glob.escape(rel) + "#"
    records = [
        (o.glob, o.size, o.overlap) for o in chunking.overrides if o.glob.startswith(prefix)
    ]  # in order: last wins
    if records:
        raw += "|" + json.dumps(records)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def iter_files(root: Path) -> Iterator[Path]:
    """Sorted walk, so ingest order (and so chunk order in the index) is reproducible."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


def _mb(n: int) -> str:
    return f"{n / 1e6:.3g} MB"


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def plan_ingest(
    paths: Sequence[Path],
    known: dict[str, FileRecord],
    chunking: ChunkingConfig,
    index_fingerprint: str,
    max_bytes: int,
    on_file: Callable[[str], None] | None = None,
) -> IngestPlan:
    """Classify every file under `paths` against the registry.

    A directory argument is the root its files' ids are relative to, and files registered under
    that root but gone from disk are deleted. A file argument is relative to its parent and
    deletes nothing.
    """
    plan = IngestPlan(changes=[])
    seen: set[str] = set()
    for arg in paths:
        arg = arg.resolve()
        if not arg.exists():
            raise FileNotFoundError(f"no such file or directory: {arg}")
        root = arg if arg.is_dir() else arg.parent
        candidates = list(iter_files(arg)) if arg.is_dir() else [arg]
        for path in candidates:
            rel = path.relative_to(root).as_posix()
            if on_file:
                on_file(rel)
            if not is_supported(path):
                plan.ignored += 1
                continue
            seen.add(rel)
            plan.changes.append(_classify(path, rel, str(root), known.get(rel), chunking, index_fingerprint, max_bytes))
        if arg.is_dir():
            for rel, rec in known.items():
                if rec.root == str(root) and rel not in seen:
                    plan.changes.append(FileChange(rel=rel, kind="deleted", root=rec.root, record=rec))
    return plan


def load_chunks(
    path: Path, root: Path, rel: str, chunking: ChunkingConfig, max_bytes: int
) -> tuple[list[LoadedDocument], list[Chunk]]:
    """Load and chunk one file exactly as an ingest does (the upload check runs this too, so a file
    it accepts is one the ingest keeps). Raises LoaderError: the reason the file is skipped."""
    docs = load_file(path, root, max_bytes=max_bytes)
    chunks = [c for d in docs for c in chunk_document(d, *chunking.for_record(rel, d.doc_id), chunking.min_size)]
    if not chunks:
        raise LoaderError("no text to index after cleaning")
    return docs, chunks


def _classify(
    path: Path,
    rel: str,
    root: str,
    old: FileRecord | None,
    chunking: ChunkingConfig,
    index_fingerprint: str,
    max_bytes: int,
) -> FileChange:
    fp = chunk_fingerprint(chunking, rel, index_fingerprint)
    try:
        st = path.stat()
    except OSError as exc:
        return FileChange(rel=rel, kind="skipped", root=root, error=f"cannot stat: {exc.strerror}")
    if old and old.fingerprint == fp and old.size == st.st_size and old.mtime_ns == st.st_mtime_ns:
        return FileChange(rel=rel, kind="unchanged", root=root, record=old)
    try:
        if st.st_size > max_bytes:
            raise LoaderError(f"file is {_mb(st.st_size)}, over the {_mb(max_bytes)} limit")
        digest = _hash_file(path)
        record = FileRecord(
            rel=rel,
            root=root,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            content_hash=digest,
            fingerprint=fp,
            n_docs=0,
            n_chunks=0,
            ingested_at=time.time(),
        )
        if old and old.fingerprint == fp and old.content_hash == digest:
            # touched but not changed: keep its chunks, refresh the stat so the next run skips it
            kept = replace(record, n_docs=old.n_docs, n_chunks=old.n_chunks)
            return FileChange(rel=rel, kind="unchanged", root=root, record=kept, touched=True)
        docs, chunks = load_chunks(path, Path(root), rel, chunking, max_bytes)
    except LoaderError as exc:
        return FileChange(rel=rel, kind="skipped", root=root, record=old, error=str(exc))
    except OSError as exc:
        return FileChange(rel=rel, kind="skipped", root=root, record=old, error=f"cannot read: {exc.strerror}")
    record = replace(record, n_docs=len(docs), n_chunks=len(chunks))
    return FileChange(rel=rel, kind="changed" if old else "new", root=root, record=record, chunks=chunks)
