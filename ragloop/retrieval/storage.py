"""Where a collection's index generations and registry live: one seam, two backends.

`Collection` does the ingest logic (plan, embed, assemble) and talks to a `CollectionStorage`
for everything durable. The storage never decides *what* a generation holds; it makes a staged
generation durable but invisible (`stage`), drops one the pointer never named (`discard`), opens
the one the pointer names (`load`), and trims old ones (`prune`). The pointer itself is the
registry state `generation`, switched by `Collection` in the same registry transaction as the
file rows, so every backend gets the same atomicity argument: a crash before that commit leaves
the old generation served, whatever was staged.

Backends:
- `FileStorage` (default): `RAGLOOP_HOME/collections/NAME`, a SQLite registry and fsynced
  generation folders, an `flock` writer lock. One machine.
- `PgStorage` (`ragloop.retrieval.pgstore`, when `RAGLOOP_COLLECTIONS_URL` names PostgreSQL):
  the same registry tables plus generation rows in one schema per collection, an advisory writer
  lock. Every instance on that database serves the same collections.

Uploaded source files (`ragloop.service.documents`) follow the backend. On files they stay in the
instance's `RAGLOOP_HOME/uploads/<collection>/`. On a shared backend the storage keeps them
(`write_sources`, called inside the same registry transaction that switches the generation, and
`source`), so any instance can re-upload, delete or re-chunk a document another one took in, and
no instance's disk holds a copy that a later ingest could bring back.
"""

from __future__ import annotations

import fcntl
import json
import secrets
import shutil
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import numpy as np
from sqlalchemy import Connection

from ragloop.config.settings import Settings
from ragloop.ingest.registry import Registry
from ragloop.ingest.types import Chunk
from ragloop.retrieval.store import (
    IndexGeneration,
    IndexSpec,
    gen_dir,
    load_generation,
    remove_stale,
    write_generation,
)

REGISTRY_FILE = "registry.sqlite"


class GenerationGone(LookupError):
    """The generation asked for is no longer stored (pruned after the pointer moved on)."""


class CollectionStorage(Protocol):
    """The durable side of one collection (see the module docstring for the contract)."""

    name: str
    shared: bool
    """Whether other instances serve this collection too (then uploaded sources live here)."""

    @property
    def registry(self) -> Registry: ...

    def exists(self) -> bool: ...

    def writer_lock(self) -> AbstractContextManager[None]:
        """Held for a whole ingest / delete / re-chunk: one writer per collection, across processes."""
        ...

    def stage(self, generation: int, chunks: list[Chunk], vectors: np.ndarray, spec: IndexSpec) -> None:
        """Store `generation` whole; readers do not see it until the pointer names it."""
        ...

    def discard(self, generation: int) -> None:
        """Remove a staged generation the pointer never named (a failed or killed writer's)."""
        ...

    def load(self, generation: int) -> IndexGeneration:
        """The stored generation, opened for search; GenerationGone if it was pruned."""
        ...

    def rows(self, generation: int) -> tuple[list[Chunk], np.ndarray] | None:
        """Chunks and vectors of a generation without building indexes; None if not stored."""
        ...

    def prune(self, current: int) -> None:
        """Drop generations other than `current` and `current - 1` (a reader that looked up the
        pointer just before a switch can still open what it was told to open)."""
        ...

    def size_bytes(self, generation: int) -> int: ...

    def drop(self) -> None:
        """Delete the whole collection, under its writer lock. Only index variants are dropped (derived
        data, rebuilt on demand); a process still holding one notices on its next read and rebuilds
        (`ragloop.retrieval.variants.IndexVariant.behind`)."""
        ...

    def write_sources(self, conn: Connection, put: Mapping[str, bytes], drop: Iterable[str]) -> None:
        """Store uploaded source files (by registry rel) and forget others, on `conn`: the registry
        transaction that switches the generation, so sources and index change together. A backend
        that is not `shared` keeps none (uploads stay in the instance's home)."""
        ...

    def source(self, rel: str) -> bytes | None:
        """The stored source of an uploaded document; None if it has none here."""
        ...

    def close(self) -> None: ...


class FileStorage:
    """Today's embedded layout under `RAGLOOP_HOME/collections/NAME`."""

    shared = False

    def __init__(self, name: str, settings: Settings) -> None:
        self.name = name
        self.dir = settings.collection_dir(name)
        self._registry: Registry | None = None

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = Registry.for_directory(self.dir)
        return self._registry

    def exists(self) -> bool:
        return (self.dir / REGISTRY_FILE).exists()

    def writer_lock(self) -> AbstractContextManager[None]:
        return self._lock()

    @contextmanager
    def _lock(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / ".lock").open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def stage(self, generation: int, chunks: list[Chunk], vectors: np.ndarray, spec: IndexSpec) -> None:
        write_generation(self.dir, generation, chunks, vectors, spec)

    def drop(self) -> None:
        """Renamed aside under the lock (a reader sees the whole folder or none), then deleted."""
        if not self.dir.exists():
            return
        self.close()
        aside = self.dir.with_name(f".{self.dir.name}.dropped-{secrets.token_hex(4)}")
        with self._lock():
            self.dir.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)

    def discard(self, generation: int) -> None:
        shutil.rmtree(gen_dir(self.dir, generation), ignore_errors=True)

    def load(self, generation: int) -> IndexGeneration:
        path = gen_dir(self.dir, generation)
        if not (path / "manifest.json").exists():
            raise GenerationGone(f"generation {generation} of {self.name!r} is not on disk")
        return load_generation(path)

    def rows(self, generation: int) -> tuple[list[Chunk], np.ndarray] | None:
        path = gen_dir(self.dir, generation)
        if not (path / "chunks.jsonl").exists():
            return None
        with (path / "chunks.jsonl").open(encoding="utf-8") as f:
            chunks = [Chunk.from_json(json.loads(line)) for line in f]
        return chunks, np.load(path / "vectors.npy", mmap_mode="r")

    def prune(self, current: int) -> None:
        remove_stale(self.dir, current)

    def size_bytes(self, generation: int) -> int:
        return sum(p.stat().st_size for p in gen_dir(self.dir, generation).rglob("*") if p.is_file())

    def write_sources(self, conn: Connection, put: Mapping[str, bytes], drop: Iterable[str]) -> None:
        return None  # one machine: uploads stay in `RAGLOOP_HOME/uploads/<collection>/`

    def source(self, rel: str) -> bytes | None:
        return None

    def close(self) -> None:
        if self._registry is not None:
            self._registry.close()
            self._registry = None


def shared_backend(settings: Settings) -> bool:
    """Whether `settings` put collections where other instances serve them too."""
    return bool(settings.collections_url)


def open_storage(name: str, settings: Settings) -> CollectionStorage:
    """The backend `settings.collections_url` selects: files when unset, PostgreSQL by URL."""
    if settings.collections_url:
        from ragloop.retrieval.pgstore import PgStorage

        return PgStorage(name, settings.collections_url)
    return FileStorage(name, settings)


def stored_collection_names(settings: Settings) -> list[str]:
    """Every collection that has a registry, on the backend `settings` selects."""
    if settings.collections_url:
        from ragloop.retrieval.pgstore import pg_collection_names

        return pg_collection_names(settings.collections_url)
    root = settings.collections_dir
    if not root.exists():
        return []
    return sorted(p.name for p in root.iterdir() if (p / REGISTRY_FILE).exists())
