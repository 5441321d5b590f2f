"""The embedding cache in PostgreSQL, shared by every instance, and ingest spread over processes.

Why: embedding is ~99% of an ingest's CPU, and the SQLite cache under each `RAGLOOP_HOME` is
private, so two instances embedded the same texts twice and one ingest could use one machine only.

Two tables the cache creates itself (under a transaction-scoped advisory lock, so concurrent first
openers wait instead of racing on `CREATE`), next to the store's tables in the database's schema,
like the conversation memory's:

- `embedding_cache (model, hash) -> dim, vector`: float32 bytes, written `ON CONFLICT DO NOTHING`
  (a text's vector is a function of the model and the text, so whoever writes first wins, and a
  second writer of the same row has nothing to add);
- `embedding_slices`: work for `ragloop worker` processes. An ingest with distributed embedding on
  cuts its missing texts (distinct, sorted by length) into ~32 slices of 16 to 128 texts
  (`slice_size`) and inserts them; any process claims one, longest texts first
  (`FOR UPDATE SKIP LOCKED`, a lease in database time, so machines' clocks do not matter), embeds
  it, and in ONE transaction writes its vectors and deletes the slice. A worker that dies
  mid-slice holds an expiring lease; the slice is claimed again after it. Completion needs no
  lease check: the vectors are the same whoever computes them.

The ingesting process runs its own slices too (an ingest never waits for workers that may not
exist), and returns when none of its slices is left, assembling rows from the cache as the local
path does. Workers give up on a slice after `MAX_ATTEMPTS` claims (a poison slice must not crash
the fleet forever); the ingester ignores that limit for its own slices, so an ingest either
finishes or raises the embedder's own error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from sqlalchemy import Engine, create_engine, text

from ragloop.models.cache import CachedEmbedder, _rows
from ragloop.models.embedding import Embedder

log = logging.getLogger("ragloop.models.shared_cache")

SLICE_TEXTS = 128
"""Most texts per distributed slice: a claim's round trips are noise beside the model run of 128."""
MIN_SLICE_TEXTS = 16
TARGET_SLICES = 32
"""An ingest is cut into about this many slices (16 to 128 texts each): a small ingest still splits
over several processes, and the long-text slices, claimed first, do not leave one process
finishing alone (benchmarks/distributed_ingest.py: 5 slices of 128 kept 1 worker idle)."""


def slice_size(missing: int, most: int = SLICE_TEXTS) -> int:
    return max(min(MIN_SLICE_TEXTS, most), min(most, -(-missing // TARGET_SLICES)))


LEASE_S = 120.0
MAX_ATTEMPTS = 3
_LOCK_KEY = int.from_bytes(hashlib.sha256(b"ragloop.embedding_cache").digest()[:8], "big", signed=True)

_DDL = (
    "CREATE TABLE IF NOT EXISTS embedding_cache ("
    " model TEXT NOT NULL, hash TEXT NOT NULL, dim INTEGER NOT NULL, vector BYTEA NOT NULL,"
    " PRIMARY KEY (model, hash))",
    "CREATE TABLE IF NOT EXISTS embedding_slices ("
    " slice_id TEXT PRIMARY KEY, model TEXT NOT NULL, max_tokens INTEGER NOT NULL,"
    " position INTEGER NOT NULL, items TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'queued',"
    " attempts INTEGER NOT NULL DEFAULT 0, leased_by TEXT, lease_token TEXT,"
    " lease_expires_at TIMESTAMPTZ, last_error TEXT, created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
)


@dataclass(frozen=True)
class Slice:
    """One claimed unit of work: (hash, text) pairs of one model, sorted by text length."""

    slice_id: str
    model: str
    max_tokens: int
    items: list[tuple[str, str]]
    lease_token: str


class SharedEmbeddingStore:
    """The two tables behind one engine; one per database URL and process (`for_url`)."""

    _open: ClassVar[dict[str, SharedEmbeddingStore]] = {}
    _open_lock = threading.Lock()

    def __init__(self, url: str) -> None:
        from ragloop.store.db import normalize_url

        self.url = normalize_url(url)
        self.engine: Engine = create_engine(self.url, pool_pre_ping=True, pool_size=2, max_overflow=4)
        self.slices_run = 0
        """Slices this process embedded and committed through this store (for benchmarks and logs)."""
        with self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            for ddl in _DDL:
                conn.execute(text(ddl))

    @classmethod
    def for_url(cls, url: str) -> SharedEmbeddingStore:
        """The process's store for `url`: `make_embedder` is called per request, the engine is not."""
        with cls._open_lock:
            store = cls._open.get(url)
            if store is None:
                store = cls._open[url] = cls(url)
            return store

    def dispose(self) -> None:
        self.engine.dispose()

    @classmethod
    def dispose_all(cls) -> None:
        """Close every engine `for_url` opened (tests, and processes that fork)."""
        with cls._open_lock:
            stores, cls._open = list(cls._open.values()), {}
        for store in stores:
            store.dispose()

    # ------------------------------------------------------------------ vectors
    def lookup(self, model: str, dim: int, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(hashes), 1000):
                rows = conn.execute(
                    text("SELECT hash, vector FROM embedding_cache WHERE model=:m AND dim=:d AND hash = ANY(:h)"),
                    {"m": model, "d": dim, "h": list(hashes[start : start + 1000])},
                )
                for h, blob in rows:
                    found[h] = np.frombuffer(bytes(blob), dtype=np.float32)
        return found

    def store(self, model: str, hashes: Sequence[str], vectors: np.ndarray, *, done_slice: str | None = None) -> None:
        """Write vectors (first writer wins); with `done_slice`, delete that slice in the same transaction."""
        with self.engine.begin() as conn:
            if len(hashes):
                conn.execute(
                    text(
                        "INSERT INTO embedding_cache (model, hash, dim, vector) VALUES (:m, :h, :d, :v)"
                        " ON CONFLICT (model, hash) DO NOTHING"
                    ),
                    [
                        {"m": model, "h": h, "d": int(v.shape[0]), "v": v.astype(np.float32).tobytes()}
                        for h, v in zip(hashes, vectors, strict=True)
                    ],
                )
            if done_slice is not None:
                conn.execute(text("DELETE FROM embedding_slices WHERE slice_id=:s"), {"s": done_slice})

    # ------------------------------------------------------------------ slices
    def enqueue(self, model: str, max_tokens: int, items: Sequence[tuple[str, str]], slice_texts: int) -> list[str]:
        """Slices of `items` (already sorted by length); ids are content-derived, so two ingests
        missing the same texts share their slices instead of embedding them twice."""
        rows: list[dict[str, object]] = []
        ids: list[str] = []
        for pos, start in enumerate(range(0, len(items), slice_texts)):
            part = list(items[start : start + slice_texts])
            digest = hashlib.sha256(f"{model}\0{max_tokens}\0{'|'.join(h for h, _ in part)}".encode())
            ids.append(digest.hexdigest()[:32])
            rows.append({"s": ids[-1], "m": model, "t": max_tokens, "p": pos, "i": json.dumps(part)})
        if rows:
            with self.engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO embedding_slices (slice_id, model, max_tokens, position, items)"
                        " VALUES (:s, :m, :t, :p, :i) ON CONFLICT (slice_id) DO NOTHING"
                    ),
                    rows,
                )
        return ids

    def claim(
        self,
        worker_id: str,
        *,
        lease_s: float = LEASE_S,
        only: Sequence[str] | None = None,
        models: Sequence[str] | None = None,
    ) -> Slice | None:
        """Lease a claimable slice (queued, or leased with an expired lease): the oldest ingest's, its
        longest texts first (the longest-job-first rule keeps the last slices short). `only`: the
        caller's own slices, claimable whatever their attempts; otherwise at most MAX_ATTEMPTS claims."""
        where = ["(status='queued' OR (status='leased' AND lease_expires_at < now()))"]
        params: dict[str, object] = {"w": worker_id, "tok": uuid.uuid4().hex, "lease": lease_s}
        if only is not None:
            where += ["slice_id = ANY(:only)"]
            params["only"] = list(only)
        else:
            where += [f"attempts < {MAX_ATTEMPTS}"]
        if models is not None:
            where += ["model = ANY(:models)"]
            params["models"] = list(models)
        sql = (
            "UPDATE embedding_slices SET status='leased', leased_by=:w, lease_token=:tok,"
            " lease_expires_at = now() + make_interval(secs => :lease), attempts = attempts + 1"
            " WHERE slice_id = (SELECT slice_id FROM embedding_slices WHERE "
            + " AND ".join(where)
            + " ORDER BY created_at, position DESC, slice_id LIMIT 1 FOR UPDATE SKIP LOCKED)"
            " RETURNING slice_id, model, max_tokens, items, lease_token"
        )
        with self.engine.begin() as conn:
            row = conn.execute(text(sql), params).first()
        if row is None:
            return None
        items = [(str(h), str(t)) for h, t in json.loads(row.items)]
        return Slice(row.slice_id, row.model, int(row.max_tokens), items, row.lease_token)

    def release(self, sl: Slice, error: str) -> None:
        """A failed attempt: claimable again at once (the lease, not a backoff, paces retries)."""
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE embedding_slices SET status='queued', leased_by=NULL, lease_expires_at=NULL,"
                    " last_error=:e WHERE slice_id=:s AND lease_token=:tok"
                ),
                {"s": sl.slice_id, "tok": sl.lease_token, "e": error[:4000]},
            )

    def pending(self, slice_ids: Sequence[str]) -> set[str]:
        """Which of `slice_ids` are not done yet."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT slice_id FROM embedding_slices WHERE slice_id = ANY(:ids)"), {"ids": list(slice_ids)}
            )
            return {r[0] for r in rows}

    def run_slice(self, sl: Slice, embedder: Embedder) -> None:
        """Embed `sl` and commit its vectors with the slice's deletion; on error release it and re-raise."""
        try:
            vectors = embedder.embed([t for _, t in sl.items])
        except Exception as exc:
            self.release(sl, f"{type(exc).__name__}: {exc}")
            raise
        self.store(sl.model, [h for h, _ in sl.items], vectors, done_slice=sl.slice_id)
        self.slices_run += 1


class SharedCachedEmbedder(CachedEmbedder):
    """`CachedEmbedder` over the shared PostgreSQL tables; with `distributed`, `embed_many` puts
    its missing texts on the slice queue for `ragloop worker`s and works through it alongside them."""

    def __init__(
        self,
        inner: Embedder,
        url: str,
        *,
        distributed: bool = False,
        max_tokens: int = 256,
        slice_texts: int = SLICE_TEXTS,
        # the most texts per slice; fewer when that gives under TARGET_SLICES slices (`slice_size`)
        lease_s: float = LEASE_S,
        poll_s: float = 0.1,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self.shared = SharedEmbeddingStore.for_url(url)
        self.distributed = distributed
        self.max_tokens = max_tokens
        self.slice_texts = slice_texts
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.worker_id = f"ingest:{uuid.uuid4().hex[:8]}"
        self.slices_total = 0
        self.slices_here = 0
        """Slices this process embedded itself (the rest were embedded by workers)."""

    def close(self) -> None:
        """Nothing to close: the engine is the process's, shared by every embedder on this URL."""

    def _lookup(self, hashes: list[str]) -> dict[str, np.ndarray]:
        return self.shared.lookup(self.name, self.dim, hashes)

    def _store(self, hashes: Sequence[str], vectors: np.ndarray) -> None:
        self.shared.store(self.name, hashes, vectors)

    def embed_many(self, texts: Sequence[str], progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        if not self.distributed:
            return super().embed_many(texts, progress)
        hashes, found, missing = self._split(texts)
        total = len(set(hashes))
        keys = sorted(missing, key=lambda h: len(missing[h]))
        size = slice_size(len(keys), self.slice_texts)
        ids = self.shared.enqueue(self.name, self.max_tokens, [(h, missing[h]) for h in keys], size)
        self.slices_total += len(ids)
        sizes = {sid: min(size, len(keys) - i * size) for i, sid in enumerate(ids)}
        left = set(ids)
        while left:
            sl = self.shared.claim(self.worker_id, lease_s=self.lease_s, only=sorted(left))
            if sl is not None:
                self.shared.run_slice(sl, self.inner)
                self.slices_here += 1
            else:
                time.sleep(self.poll_s)  # every remaining slice is leased to a worker
            left = self.shared.pending(sorted(left))
            if progress:
                progress(total - sum(sizes[s] for s in left), total)
        if progress and not ids:
            progress(total, total)
        found.update(self.shared.lookup(self.name, self.dim, keys))
        return _rows(hashes, found, self.dim)


def work_slices(
    shared: SharedEmbeddingStore,
    embedder_for: Callable[[str, int], Embedder],
    stop: threading.Event,
    *,
    worker_id: str,
    lease_s: float = LEASE_S,
    poll_s: float = 0.5,
    delay_s: float = 0.0,
    max_slices: int | None = None,
) -> int:
    """The `ragloop worker` side: claim, embed and commit slices until `stop` (or `max_slices`).
    `embedder_for(model, max_tokens)` builds the uncached embedder a slice names; `delay_s` waits
    after each claim (fault-injection tests kill a worker inside it). Returns slices done."""
    done = 0
    while not stop.is_set() and (max_slices is None or done < max_slices):
        try:
            sl = shared.claim(worker_id, lease_s=lease_s)
            if sl is None:
                stop.wait(poll_s)
                continue
            if delay_s:
                time.sleep(delay_s)
            shared.run_slice(sl, embedder_for(sl.model, sl.max_tokens))
            done += 1
        except Exception as exc:  # the database briefly down, an unknown model: keep serving
            log.warning("embedding worker %s: %s: %s", worker_id, type(exc).__name__, str(exc)[:300])
            stop.wait(min(5.0, poll_s * 4))
    return done
