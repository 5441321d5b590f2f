"""Process settings from the environment: where state lives and how many threads to use.

Settings are about the machine, not the pipeline: changing them never changes an answer,
so they are not part of the pipeline version id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ragloop.config.clock import Clock, process_clock

DEFAULT_HOME = Path("~/.local/share/ragloop")


def _default_home() -> Path:
    raw = os.environ.get("RAGLOOP_HOME")
    return Path(raw).expanduser() if raw else DEFAULT_HOME.expanduser()


def _default_threads() -> int:
    raw = os.environ.get("RAGLOOP_THREADS")
    if raw:
        return max(1, int(raw))
    return max(1, min(os.cpu_count() or 1, 4))


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    return default if raw is None else raw.strip().lower() not in ("0", "false", "no", "off", "")


def _default_llm_threads() -> int:
    """llama.cpp's threads spin while they wait for each other: with every core taken, one busy
    core (the embedder, a worker, another request) slows generation ~10x (measured on 2 cores:
    Qwen 1.5B 9.8 tok/s with 1 thread, 0.9 with 2, benchmarks/results/local_models.md). Leave a
    core free for the rest of the process."""
    raw = os.environ.get("RAGLOOP_LLM_THREADS")
    if raw:
        return max(1, int(raw))
    return max(1, min((os.cpu_count() or 1) - 1, 8))


def _embedding_cache_url() -> str | None:
    raw = os.environ.get("RAGLOOP_EMBEDDING_CACHE_URL", "").strip()
    if raw.lower() in ("off", "local", "none"):
        return None
    if raw:
        return raw
    db = os.environ.get("RAGLOOP_DATABASE_URL", "").strip()
    return db if db.startswith(("postgres://", "postgresql")) else None


@dataclass(frozen=True)
class Settings:
    """`RAGLOOP_HOME` holds all state: registries, indexes, caches and databases."""

    home: Path = field(default_factory=_default_home)
    threads: int = field(default_factory=_default_threads)
    llm_threads: int = field(default_factory=_default_llm_threads)
    # embed each new chunk's sentences and strips at ingest (the texts the offline scorers and
    # the reranker read), so a question never waits for document text to be embedded: about
    # doubles the embedding work of an ingest; answers are the same either way
    precompute_passage_vectors: bool = field(
        default_factory=lambda: (
            os.environ.get("RAGLOOP_PRECOMPUTE_PASSAGE_VECTORS", "1").lower() not in ("0", "false", "no")
        )
    )
    collections_url: str | None = field(
        default_factory=lambda: os.environ.get("RAGLOOP_COLLECTIONS_URL", "").strip() or None
    )
    """`RAGLOOP_COLLECTIONS_URL`: a PostgreSQL URL keeps every collection (registry, chunks, vectors,
    index generations) in that database, shared by every instance that names it
    (`ragloop.retrieval.pgstore`); unset, collections are folders under `home`."""
    embedding_cache_url: str | None = field(default_factory=lambda: _embedding_cache_url())
    """Where embeddings are cached: `RAGLOOP_EMBEDDING_CACHE_URL`, else `RAGLOOP_DATABASE_URL` when it
    names PostgreSQL (every instance on that database shares one cache, `ragloop.models.shared_cache`);
    None means the SQLite file under `home/cache`. `off` forces the local file."""
    distributed_embedding: bool = field(default_factory=lambda: _flag("RAGLOOP_DISTRIBUTED_EMBEDDING", False))
    """`RAGLOOP_DISTRIBUTED_EMBEDDING=on` (with a shared cache): an ingest's missing texts go out as slices
    that `ragloop worker` processes embed alongside the ingesting process. Off by default: with no
    worker running it only adds round trips."""
    max_file_bytes: int = field(default_factory=lambda: int(os.environ.get("RAGLOOP_MAX_FILE_BYTES", 50 * 1024 * 1024)))
    clock: Clock = field(default_factory=process_clock, compare=False, repr=False)
    """`RAGLOOP_CLOCK` (`ragloop.config.clock`): the system's, or a simulation's compressed one. The store's
    stamps and every window of the loop read the same process clock; this is it, for code handed Settings."""

    @classmethod
    def from_env(cls) -> Settings:
        return cls()

    @property
    def collections_dir(self) -> Path:
        return self.home / "collections"

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    def collection_dir(self, name: str) -> Path:
        return self.collections_dir / name
