"""Embedding cache keyed by (model, content hash): re-ingesting a changed file re-embeds only
the chunks whose text changed, and a second collection over the same files embeds nothing.

SQLite in WAL mode, one row per vector; each `embed` call commits once, so an interrupted
ingest keeps everything embedded before the interrupt.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragloop import sqlite
from ragloop.models.embedding import Embedder


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

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._lock:
            found = self._lookup(sorted(set(hashes)))
        missing: dict[str, str] = {}
        for i, h in enumerate(hashes):
            if h in found:
                out[i] = found[h]
            else:
                missing.setdefault(h, texts[i])
        self.hits += len(texts) - sum(1 for h in hashes if h in missing)
        self.misses += len(missing)
        if missing:
            keys = list(missing)
            vectors = self.inner.embed([missing[h] for h in keys])
            new = dict(zip(keys, vectors, strict=True))
            with self._lock:
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings (model, hash, dim, vector) VALUES (?, ?, ?, ?)",
                    [(self.name, h, self.dim, v.astype(np.float32).tobytes()) for h, v in new.items()],
                )
                self._db.commit()
            for i, h in enumerate(hashes):
                if h in new:
                    out[i] = new[h]
        return out
