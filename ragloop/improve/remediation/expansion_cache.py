"""The semantic query-expansion cache: a failed query's embedding with the oracle chunk ids to
pre-load when a later query lands within cosine `threshold` of it (the seed's 0.90).

Two backends hold the entries, behind `ExpansionBackend`: Redis (`RAGLOOP_REDIS_URL`; a hash per
collection and a version counter, written in one MULTI) and the collection's registry (SQLite or
any SQLAlchemy URL; entries and version in one transaction). Neither is on the lookup path: the
`ExpansionCache` keeps the entries as one normalised float32 matrix in process and asks the backend
only for its version (at most every `refresh_s`), reloading when it moved. A lookup is a matrix-
vector product; above `exact_below` entries, a random-hyperplane sign sketch (128 bits) first
drops the rows that cannot be within the threshold: the Hamming cut is set `z` = 5 standard
deviations above the expected distance at exactly the threshold angle, so a true match is missed
with probability below 3e-7, and the survivors are scored exactly.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ragloop.ingest.registry import Registry, SemanticExpansion
from ragloop.retrieval.collection import Collection

log = logging.getLogger("ragloop.improve")
REDIS_URL_ENV = "RAGLOOP_REDIS_URL"

SKETCH_BITS = 128
SKETCH_Z = 5.0


@dataclass(frozen=True)
class ExpansionEntry:
    entry_id: str
    query: str
    embedder: str
    vector: np.ndarray
    chunk_ids: tuple[str, ...]
    source: str = ""
    created_at: float = 0.0


class ExpansionBackend(Protocol):
    name: str

    def put(self, entry: ExpansionEntry) -> int:
        """Insert or replace; returns the new version."""
        ...

    def remove(self, entry_id: str) -> bool: ...

    def get(self, entry_id: str) -> ExpansionEntry | None: ...

    def entries(self) -> list[ExpansionEntry]: ...

    def version(self) -> int: ...


def _vec_bytes(v: np.ndarray) -> bytes:
    return np.ascontiguousarray(v, dtype=np.float32).tobytes()


def _bytes_vec(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.float32).copy()


class RegistryExpansionBackend:
    """Entries in the collection's registry database (the default without Redis)."""

    name = "registry"

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def put(self, entry: ExpansionEntry) -> int:
        return self.registry.put_semantic_expansion(
            SemanticExpansion(
                entry_id=entry.entry_id,
                query=entry.query,
                embedder=entry.embedder,
                vector=_vec_bytes(entry.vector),
                chunk_ids=entry.chunk_ids,
                source=entry.source,
                created_at=entry.created_at,
            )
        )

    def remove(self, entry_id: str) -> bool:
        return self.registry.delete_semantic_expansion(entry_id)

    def get(self, entry_id: str) -> ExpansionEntry | None:
        return next((e for e in self.entries() if e.entry_id == entry_id), None)

    def entries(self) -> list[ExpansionEntry]:
        return [
            ExpansionEntry(e.entry_id, e.query, e.embedder, _bytes_vec(e.vector), e.chunk_ids, e.source, e.created_at)
            for e in self.registry.semantic_expansions()
        ]

    def version(self) -> int:
        return self.registry.semantic_version()


class RedisExpansionBackend:
    """Entries in Redis: `HSET {prefix}:{collection} entry_id json`, `INCR {prefix}:{collection}:version`."""

    name = "redis"

    def __init__(self, client: Any, collection: str, *, prefix: str = "ragloop:expansion") -> None:
        self.client = client
        self.key = f"{prefix}:{collection}"
        self.version_key = f"{self.key}:version"

    @classmethod
    def from_url(cls, url: str, collection: str, **kwargs: Any) -> RedisExpansionBackend:
        import redis  # the `redis` extra

        return cls(redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0), collection, **kwargs)

    def put(self, entry: ExpansionEntry) -> int:
        doc = {
            "query": entry.query,
            "embedder": entry.embedder,
            "vector": base64.b64encode(_vec_bytes(entry.vector)).decode(),
            "chunk_ids": list(entry.chunk_ids),
            "source": entry.source,
            "created_at": entry.created_at,
        }
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.key, entry.entry_id, json.dumps(doc))
        pipe.incr(self.version_key)
        return int(pipe.execute()[1])

    def remove(self, entry_id: str) -> bool:
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(self.key, entry_id)
        pipe.incr(self.version_key)
        return bool(pipe.execute()[0])

    @staticmethod
    def _decode(entry_id: str | bytes, raw: str | bytes) -> ExpansionEntry:
        d = json.loads(raw)
        eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        vec = _bytes_vec(base64.b64decode(d["vector"]))
        return ExpansionEntry(
            eid, d["query"], d["embedder"], vec, tuple(d["chunk_ids"]), d.get("source", ""), d.get("created_at", 0.0)
        )

    def get(self, entry_id: str) -> ExpansionEntry | None:
        raw = self.client.hget(self.key, entry_id)
        return None if raw is None else self._decode(entry_id, raw)

    def entries(self) -> list[ExpansionEntry]:
        found = self.client.hgetall(self.key)
        return sorted((self._decode(k, v) for k, v in found.items()), key=lambda e: e.entry_id)

    def version(self) -> int:
        raw = self.client.get(self.version_key)
        return int(raw) if raw is not None else 0


def make_expansion_backend(registry: Registry, collection: str, redis_url: str | None) -> ExpansionBackend:
    """Redis when a URL is configured, the collection's registry otherwise."""
    if redis_url:
        return RedisExpansionBackend.from_url(redis_url, collection)
    return RegistryExpansionBackend(registry)


def serving_expansion(
    collection: Collection, *, redis_url: str | None = None, threshold: float = 0.90, max_chunks: int = 5
) -> ExpansionCache:
    """The lookup a serving retriever consults: the collection's entries (Redis with
    `RAGLOOP_REDIS_URL`, else its registry), refreshed in the background, failing open."""
    url = redis_url if redis_url is not None else os.environ.get(REDIS_URL_ENV)
    backend = make_expansion_backend(collection.registry, collection.name, url)
    embedder = collection.load().manifest.embedder if collection.generation() else None
    return ExpansionCache(
        backend, threshold=threshold, max_chunks=max_chunks, embedder=embedder, background=True, fail_open=True
    )


def sketch_cut(threshold: float, bits: int = SKETCH_BITS, z: float = SKETCH_Z) -> int:
    """Largest Hamming distance between sign sketches kept as a possible match at `threshold`."""
    p = math.acos(max(-1.0, min(1.0, threshold))) / math.pi
    return math.ceil(bits * p + z * math.sqrt(bits * p * (1 - p)))


@dataclass(frozen=True)
class _Snapshot:
    matrix: np.ndarray
    chunks: list[tuple[str, ...]]
    planes: np.ndarray | None
    sketch: np.ndarray | None


class ExpansionCache:
    """The in-process lookup (`ragloop.retrieval.expansion.ExpansionLookup`) over one backend."""

    def __init__(
        self,
        backend: ExpansionBackend,
        *,
        threshold: float = 0.90,
        max_chunks: int = 5,
        embedder: str | None = None,
        refresh_s: float = 1.0,
        exact_below: int = 2048,
        background: bool = False,
        fail_open: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`embedder`: only entries embedded by this model are matched (None: any of the query's
        dimension). `refresh_s`: how often a lookup asks the backend for its version (0: every
        lookup). `background`: once loaded, reload a changed version in a thread and keep serving
        the previous entries meanwhile (the serving path: a 10k-entry reload takes ~0.5-2 s); off,
        the lookup that sees the change reloads first (what a measurement wants). `fail_open`: a
        backend error is logged and the entries loaded so far keep serving (the query path never
        fails for the cache); off, it raises (a measurement must not silently miss the cache)."""
        self.backend = backend
        self.threshold = threshold
        self.max_chunks = max_chunks
        self.embedder = embedder
        self.refresh_s = refresh_s
        self.exact_below = exact_below
        self.background = background
        self.fail_open = fail_open
        self._monotonic = monotonic
        self.loader: threading.Thread | None = None
        self._lock = threading.Lock()
        self._version: int | None = None
        self._checked = -math.inf
        self._snap = _Snapshot(np.zeros((0, 0), dtype=np.float32), [], None, None)
        self._cut = sketch_cut(threshold)

    def __len__(self) -> int:
        self.refresh()
        return len(self._snap.chunks)

    def refresh(self, *, force: bool = False) -> bool:
        """Reload when the backend's version moved; True when it did."""
        now = self._monotonic()
        if not force and now - self._checked < self.refresh_s:
            return False
        try:
            return self._refresh(now, force)
        except Exception as exc:
            if not self.fail_open:
                raise
            self._checked = now  # retried after the interval, not on every query
            log.warning(
                "expansion cache %s unavailable, serving %d entries: %s", self.backend.name, len(self._snap.chunks), exc
            )
            return False

    def _refresh(self, now: float, force: bool) -> bool:
        with self._lock:
            self._checked = now
            version = self.backend.version()
            if not force and version == self._version:
                return False
            if self.background and not force and self._version is not None:
                if self.loader is None or not self.loader.is_alive():
                    self.loader = threading.Thread(target=self._reload, name="expansion-cache-reload", daemon=True)
                    self.loader.start()
                return False
            self._load(self.backend.entries(), version)
            return True

    def _reload(self) -> None:
        try:
            version = self.backend.version()
            self._load(self.backend.entries(), version)
        except Exception as exc:
            log.warning("expansion cache %s reload failed: %s", self.backend.name, exc)

    def _load(self, entries: Sequence[ExpansionEntry], version: int) -> None:
        keep = [e for e in entries if self.embedder is None or e.embedder == self.embedder]
        dims = {len(e.vector) for e in keep}
        if len(dims) > 1:  # mixed models without a filter: keep the commonest dimension
            dim = max(dims, key=lambda d: sum(len(e.vector) == d for e in keep))
            keep = [e for e in keep if len(e.vector) == dim]
        if keep:
            m = np.stack([e.vector for e in keep]).astype(np.float32)
            norms = np.linalg.norm(m, axis=1, keepdims=True)
            m = (m / np.where(norms == 0, 1.0, norms)).astype(np.float32)
        else:
            m = np.zeros((0, 0), dtype=np.float32)
        sketch = planes = None
        if len(keep) >= self.exact_below:
            planes = np.random.default_rng(0).standard_normal((SKETCH_BITS, m.shape[1])).astype(np.float32)
            # one contiguous row per 64-bit word: a column-wise XOR + popcount is ~10x faster than
            # reducing along a 2-wide axis
            sketch = np.ascontiguousarray(np.packbits(m @ planes.T > 0, axis=1).view(np.uint64).T)
        self._snap = _Snapshot(m, [e.chunk_ids for e in keep], planes, sketch)  # one swap: readers see old or new
        self._version = version

    def lookup(self, query: str, vector: np.ndarray) -> list[str]:
        self.refresh()
        snap = self._snap
        m, chunks, planes, sketch = snap.matrix, snap.chunks, snap.planes, snap.sketch
        q = np.asarray(vector, dtype=np.float32).ravel()
        if not chunks or q.shape[0] != m.shape[1]:
            return []
        norm = float(np.linalg.norm(q))
        if norm == 0.0:
            return []
        q = q / norm
        if sketch is not None and planes is not None:
            qs = np.packbits(planes @ q > 0).view(np.uint64)
            far = np.bitwise_count(sketch[0] ^ qs[0])  # uint8: at most 128 differing bits
            for w in range(1, len(qs)):
                far += np.bitwise_count(sketch[w] ^ qs[w])
            rows = np.flatnonzero(far <= self._cut)
            sims = m[rows] @ q
        else:
            rows = np.arange(len(chunks))
            sims = m @ q
        hit = np.flatnonzero(sims >= self.threshold)
        if hit.size == 0:
            return []
        order = hit[np.argsort(-sims[hit], kind="stable")]
        out: dict[str, None] = {}
        for i in order.tolist():
            for cid in chunks[int(rows[i])]:
                out.setdefault(cid)
                if len(out) >= self.max_chunks:
                    return list(out)
        return list(out)
