"""Embedding cache keyed by (model, content hash): re-ingesting a changed file re-embeds only
the chunks whose text changed, and a second collection over the same files embeds nothing.

SQLite in WAL mode, one row per vector; each `embed` call (and each slice of `embed_many`)
commits once, in one transaction, so an interrupted ingest keeps everything embedded before the
interrupt.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ragloop import sqlite
from ragloop.models.embedding import Embedder, embed_sorted


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class CachedEmbedder(Embedder):
    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        # durability "normal": a cache, lost rows are re-embedded; see ragloop.sqlite for the policy
        self._db = sqlite.connect(path, durability="normal")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS embeddings ("
            " model TEXT NOT NULL, hash TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL,"
            " PRIMARY KEY (model, hash))"
        )
        self._db.commit()

    def close(self) -> None:
        self._db.close()

    def _lookup(self, hashes: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(hashes), 500):
            part = hashes[start : start + 500]
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT hash, vector FROM embeddings WHERE model=? AND dim=? AND hash IN ({marks})",
                [self.name, self.dim, *part],
            )
            for h, blob in rows:
                found[h] = np.frombuffer(blob, dtype=np.float32)
        return found

    def _store(self, hashes: Sequence[str], vectors: np.ndarray) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO embeddings (model, hash, dim, vector) VALUES (?, ?, ?, ?)",
                [
                    (self.name, h, self.dim, v.astype(np.float32).tobytes())
                    for h, v in zip(hashes, vectors, strict=True)
                ],
            )
            self._db.commit()

    def _split(self, texts: Sequence[str]) -> tuple[list[str], dict[str, np.ndarray], dict[str, str]]:
        """Hashes of `texts`, the cached vectors among them, and the distinct missing texts."""
        hashes = [content_hash(t) for t in texts]
        with self._lock:
            found = self._lookup(sorted(set(hashes)))
        missing: dict[str, str] = {}
        for h, t in zip(hashes, texts, strict=True):
            if h not in found:
                missing.setdefault(h, t)
        self.hits += len(texts) - sum(1 for h in hashes if h in missing)
        self.misses += len(missing)
        return hashes, found, missing

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        hashes, found, missing = self._split(texts)
        if missing:
            keys = list(missing)
            vectors = self.inner.embed([missing[h] for h in keys])
            self._store(keys, vectors)
            found.update(zip(keys, vectors, strict=True))
        return _rows(hashes, found, self.dim)

    def embed_many(self, texts: Sequence[str], progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """The cached texts from the cache, the rest by `Embedder.embed_many` (distinct, sorted by
        length, one commit per slice). `progress` counts distinct texts, cached ones included."""
        hashes, found, missing = self._split(texts)
        done_before = len(set(hashes)) - len(missing)
        keys = list(missing)
        hash_of = {missing[h]: h for h in keys}

        def embed_and_store(batch: Sequence[str]) -> np.ndarray:
            vectors = self.inner.embed(batch)
            self._store([hash_of[t] for t in batch], vectors)
            return vectors

        def report(done: int, total: int) -> None:
            if progress:
                progress(done_before + done, done_before + total)

        new = embed_sorted(embed_and_store, self.dim, [missing[h] for h in keys], report)
        found.update(zip(keys, new, strict=True))
        if progress and not keys:
            progress(done_before, done_before)
        return _rows(hashes, found, self.dim)


def _rows(hashes: Sequence[str], vectors: dict[str, np.ndarray], dim: int) -> np.ndarray:
    out = np.zeros((len(hashes), dim), dtype=np.float32)
    for i, h in enumerate(hashes):
        out[i] = vectors[h]
    return out
