"""Vector indexes behind one small protocol: exact numpy search, usearch HNSW, faiss HNSW, and
pgvector HNSW in PostgreSQL (`pgvector_index.py`, shared by every process on the server).

Exact search is the default because below ~100k chunks a matrix-vector product is both faster
to build (nothing to build) and perfect; ANN pays off only when a query scan gets slow. All
backends take L2-normalised float32 rows and report cosine similarity (inner product), so the
fusion layer sees the same score scale whichever backend served the query.

Row ids are positions: the n-th vector added is id n, matching the chunk order of the BM25
index, so the two retrievers can be fused without a lookup table.

Each backend saves its data plus `vectors.json` (backend, dim, count) so `load_vector_index`
can reopen a directory without being told what is in it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

log = logging.getLogger(__name__)

_MANIFEST = "vectors.json"
_NORM_TOLERANCE = 1e-2


class VectorIndex(Protocol):
    name: str

    def add(self, vectors: np.ndarray) -> None: ...
    def search(self, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]: ...
    def search_many(self, queries: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]: ...
    def __len__(self) -> int: ...
    def save(self, directory: Path) -> None: ...


# -- validation shared by every backend ---------------------------------------------------------


def _check_rows(vectors: np.ndarray, dim: int) -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise ValueError(f"expected vectors of shape [n, {dim}], got {list(arr.shape)}")
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise ValueError(f"vector {bad} contains NaN or infinity")
    norms = np.linalg.norm(arr, axis=1)
    off = np.abs(norms - 1.0) > _NORM_TOLERANCE
    if off.any():
        bad = int(np.flatnonzero(off)[0])
        raise ValueError(f"vectors must be L2-normalised; row {bad} has norm {norms[bad]:.4f}")
    return np.ascontiguousarray(arr)


def _check_queries(queries: np.ndarray, dim: int, *, single: bool) -> np.ndarray:
    """Queries are normalised here so returned scores are true cosines even for raw inputs."""
    arr = np.asarray(queries, dtype=np.float32)
    want = f"[{dim}]" if single else f"[q, {dim}]"
    if arr.ndim != (1 if single else 2) or arr.shape[-1] != dim:
        raise ValueError(f"expected query of shape {want}, got {list(arr.shape)}")
    rows = arr.reshape(-1, dim)
    if not np.isfinite(rows).all():
        raise ValueError("query contains NaN or infinity")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError("query vector has zero length; cannot compute cosine similarity")
    return np.ascontiguousarray(rows / norms, dtype=np.float32)


def _padded(q: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((q, n), -1, dtype=np.int64), np.full((q, n), -np.inf, dtype=np.float32)


def _tie_sorted(ids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Best first, equal scores by lower id: ANN libraries leave tie order unspecified."""
    order = np.lexsort((ids, -scores))
    return ids[order].astype(np.int64), scores[order].astype(np.float32)


def _write_manifest(directory: Path, backend: str, dim: int, count: int, **extra: Any) -> None:
    text = json.dumps({"backend": backend, "dim": dim, "count": count, **extra}, sort_keys=True)
    _replace(directory / _MANIFEST, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _replace(path: Path, write: Callable[[Path], object]) -> None:
    """Write beside `path`, then rename over it: saving an index loaded by memory map into its
    own directory must not truncate the very file being mapped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("tmp-" + path.name)  # same suffix: np.save would append ".npy" otherwise
    write(tmp)
    os.replace(tmp, path)


def _fill(ids: np.ndarray, scores: np.ndarray, row: int, keys: np.ndarray, sims: np.ndarray) -> None:
    i, s = _tie_sorted(keys.astype(np.int64), sims)
    ids[row, : len(i)], scores[row, : len(s)] = i, s


def _first_row(found: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Single-query result from a one-row batch, padding dropped."""
    ids, scores = found
    keep = ids[0] >= 0
    return ids[0][keep], scores[0][keep]


def _missing(extra: str, package: str) -> ImportError:
    return ImportError(f"this vector backend needs {package}: pip install 'ragloop[{extra}]'")


# -- exact -------------------------------------------------------------------------------------


class ExactIndex:
    """Brute-force inner product; rows live in a doubling buffer so many small adds stay linear."""

    name = "exact"
    _QUERY_BLOCK = 256

    def __init__(self, dim: int) -> None:
        if dim <= 0:
            raise ValueError(f"dimension must be positive, got {dim}")
        self.dim = dim
        self._buf = np.zeros((0, dim), dtype=np.float32)
        self._n = 0

    @property
    def matrix(self) -> np.ndarray:
        return self._buf[: self._n]

    def __len__(self) -> int:
        return self._n

    def add(self, vectors: np.ndarray) -> None:
        rows = _check_rows(vectors, self.dim)
        need = self._n + len(rows)
        if need > len(self._buf) or not self._buf.flags.writeable:
            grown = np.empty((max(need, 2 * len(self._buf), 1024), self.dim), dtype=np.float32)
            grown[: self._n] = self._buf[: self._n]  # also copies a read-only mmap into memory
            self._buf = grown
        self._buf[self._n : need] = rows
        self._n = need

    def search(self, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        q = _check_queries(query, self.dim, single=True)[0]
        n = min(n, self._n)
        if n <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return self._top(self.matrix @ q, n)

    @staticmethod
    def _top(scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        if n < len(scores):
            kth = np.partition(scores, len(scores) - n)[len(scores) - n]
            cand = np.flatnonzero(scores >= kth)  # keeps ties with the n-th best for the tie-break
        else:
            cand = np.arange(len(scores))
        ids, s = _tie_sorted(cand, scores[cand])
        return ids[:n], s[:n]

    def search_many(self, queries: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        qs = _check_queries(queries, self.dim, single=False)
        ids, scores = _padded(len(qs), max(n, 0))
        k = min(n, self._n)
        if k <= 0:
            return ids, scores
        for start in range(0, len(qs), self._QUERY_BLOCK):  # bounds the [q, N] score matrix
            block = qs[start : start + self._QUERY_BLOCK] @ self.matrix.T
            for row, sc in enumerate(block):
                i, s = self._top(sc, k)
                ids[start + row, :k], scores[start + row, :k] = i, s
        return ids, scores

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        matrix = np.ascontiguousarray(self.matrix)
        _replace(directory / "vectors.npy", lambda tmp: np.save(tmp, matrix, allow_pickle=False))
        _write_manifest(directory, self.name, self.dim, self._n)

    @classmethod
    def load(cls, directory: Path) -> ExactIndex:
        """Memory-maps the matrix: opening is instant and pages load on first search."""
        matrix = np.load(Path(directory) / "vectors.npy", mmap_mode="r", allow_pickle=False)
        index = cls(int(matrix.shape[1]))
        index._buf, index._n = matrix, int(matrix.shape[0])
        return index


# -- usearch -----------------------------------------------------------------------------------


class USearchIndex:
    """usearch HNSW with metric "ip" on f32 storage (distance = 1 - cosine on unit vectors).

    Graph construction uses `threads` workers (0 = all cores); with more than one the graph,
    and so the rare borderline neighbour, can differ between two builds of the same data.
    Pass threads=1 for bit-identical rebuilds. expansion_search is 128, not usearch's 64:
    recall@10 on hard (isotropic random) data rises from ~0.90 to ~0.98 for ~1.5x query time.
    """

    name = "usearch"
    _FILE = "usearch.index"

    def __init__(
        self,
        dim: int,
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = 128,
        threads: int = 0,
    ) -> None:
        try:
            from usearch.index import Index
        except ImportError as exc:
            raise _missing("ann", "usearch") from exc
        if dim <= 0:
            raise ValueError(f"dimension must be positive, got {dim}")
        self.dim, self.threads = dim, threads
        self._params = {"connectivity": connectivity, "expansion_add": expansion_add}
        self._index: Any = Index(
            ndim=dim,
            metric="ip",
            dtype="f32",
            connectivity=connectivity,
            expansion_add=expansion_add,
            expansion_search=expansion_search,
        )
        self._viewed = False  # True while the graph is a read-only memory map of a saved file

    def __len__(self) -> int:
        return len(self._index)

    def add(self, vectors: np.ndarray) -> None:
        rows = _check_rows(vectors, self.dim)
        if not len(rows):
            return
        if self._viewed:  # a view is immutable: copy it into memory (not from its path, which
            # may since have been replaced by a newer index)
            search_ef = int(self._index.expansion_search)
            self._index = _restore(self._index.save(), view=False)
            self._index.expansion_search = search_ef
            self._viewed = False
        keys = np.arange(len(self), len(self) + len(rows), dtype=np.uint64)
        self._index.add(keys, rows, threads=self.threads)

    def search(self, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        return _first_row(self.search_many(_check_queries(query, self.dim, single=True), n))

    def search_many(self, queries: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        qs = _check_queries(queries, self.dim, single=False)
        ids, scores = _padded(len(qs), max(n, 0))
        k = min(n, len(self))
        if k <= 0 or not len(qs):
            return ids, scores
        # usearch widens the beam to max(expansion_search, k) by itself (faiss does not)
        found = self._index.search(qs, k, threads=self.threads)
        keys = np.asarray(found.keys).reshape(len(qs), -1)
        dists = np.asarray(found.distances, dtype=np.float32).reshape(len(qs), -1)
        # a one-row batch comes back as a single `Matches` holding only the valid results
        counts = np.asarray(getattr(found, "counts", [keys.shape[1]])).reshape(-1)
        for row, c in enumerate(counts.tolist()):
            _fill(ids, scores, row, keys[row, :c], 1.0 - dists[row, :c])
        return ids, scores

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        _replace(directory / self._FILE, lambda tmp: self._index.save(str(tmp)))
        _write_manifest(
            directory,
            self.name,
            self.dim,
            len(self),
            expansion_search=int(self._index.expansion_search),
            **self._params,
        )

    @classmethod
    def load(cls, directory: Path, view: bool = True) -> USearchIndex:
        """view=True memory-maps the graph (instant open); a later add() loads it fully."""
        directory = Path(directory)
        meta = json.loads((directory / _MANIFEST).read_text(encoding="utf-8"))
        index = cls(
            int(meta["dim"]),
            connectivity=int(meta["connectivity"]),
            expansion_add=int(meta["expansion_add"]),
            expansion_search=int(meta["expansion_search"]),
        )
        index._index = _restore(directory / cls._FILE, view=view)
        index._index.expansion_search = int(meta["expansion_search"])
        index._viewed = view
        return index


def _restore(source: Path | bytes | bytearray, view: bool) -> Any:
    from usearch.index import Index

    restored = Index.restore(str(source) if isinstance(source, Path) else source, view=view)
    if restored is None:
        raise ValueError(f"cannot read usearch index {source if isinstance(source, Path) else ''}")
    return restored


# -- faiss -------------------------------------------------------------------------------------


class FaissIndex:
    """faiss IndexHNSWFlat with METRIC_INNER_PRODUCT (exact scores on returned neighbours).

    HNSW rather than IVF because IVF needs a training pass over representative vectors before
    the first add, which does not fit incremental ingestion; HNSW accepts rows as they come.
    """

    name = "faiss"
    _FILE = "faiss.index"

    def __init__(self, dim: int, m: int = 32, ef_construction: int = 128, ef_search: int = 128) -> None:
        faiss = _import_faiss()
        if dim <= 0:
            raise ValueError(f"dimension must be positive, got {dim}")
        self.dim = dim
        self._index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
        self._index.hnsw.efConstruction = ef_construction
        self._index.hnsw.efSearch = ef_search

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        rows = _check_rows(vectors, self.dim)
        if len(rows):
            self._index.add(rows)  # faiss numbers rows sequentially: id == position

    def search(self, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        return _first_row(self.search_many(_check_queries(query, self.dim, single=True), n))

    def search_many(self, queries: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        qs = _check_queries(queries, self.dim, single=False)
        ids, scores = _padded(len(qs), max(n, 0))
        k = min(n, len(self))
        if k <= 0 or not len(qs):
            return ids, scores
        # HNSW cannot return more than efSearch results: widen the beam for large k, per call
        # (thread-safe, unlike setting hnsw.efSearch)
        params = _import_faiss().SearchParametersHNSW(efSearch=max(int(self._index.hnsw.efSearch), k))
        dists, labels = self._index.search(qs, k, params=params)
        for row in range(len(qs)):
            keep = labels[row] >= 0
            _fill(ids, scores, row, labels[row][keep], dists[row][keep])
        return ids, scores

    def save(self, directory: Path) -> None:
        faiss = _import_faiss()
        directory = Path(directory)
        _replace(directory / self._FILE, lambda tmp: faiss.write_index(self._index, str(tmp)))
        _write_manifest(directory, self.name, self.dim, len(self))

    @classmethod
    def load(cls, directory: Path) -> FaissIndex:
        faiss = _import_faiss()
        directory = Path(directory)
        meta = json.loads((directory / _MANIFEST).read_text(encoding="utf-8"))
        index = cls.__new__(cls)
        index.dim = int(meta["dim"])
        index._index = faiss.read_index(str(directory / cls._FILE))
        return index


def _import_faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise _missing("faiss", "faiss-cpu") from exc
    return faiss


# -- factory -----------------------------------------------------------------------------------


def make_vector_index(
    backend: Literal["exact", "usearch", "faiss", "pgvector", "auto"],
    dim: int,
    expected_size: int = 0,
    ann_threshold: int = 100_000,
) -> VectorIndex:
    """`auto`: exact up to `ann_threshold` vectors, usearch above it (exact if usearch is absent).

    Falling back instead of failing keeps a default install working on any collection size;
    the explicit backends fail loudly because the user asked for that library.
    """
    if backend == "exact":
        return ExactIndex(dim)
    if backend == "usearch":
        return USearchIndex(dim)
    if backend == "faiss":
        return FaissIndex(dim)
    if backend == "pgvector":  # imported here: psycopg is an extra, and only this backend needs it
        from ragloop.retrieval.pgvector_index import PgVectorIndex

        return PgVectorIndex(dim)
    if backend == "auto":
        if expected_size <= ann_threshold:
            return ExactIndex(dim)
        try:
            return USearchIndex(dim)
        except ImportError:
            log.warning("usearch not installed; using exact search for %d vectors", expected_size)
            return ExactIndex(dim)
    raise ValueError(f"unknown vector backend {backend!r}")


def load_vector_index(directory: Path) -> VectorIndex:
    directory = Path(directory)
    try:
        meta = json.loads((directory / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"no readable vector index in {directory}: {exc}") from exc
    backend = meta.get("backend")
    if backend == "exact":
        return ExactIndex.load(directory)
    if backend == "usearch":
        return USearchIndex.load(directory)
    if backend == "faiss":
        return FaissIndex.load(directory)
    if backend == "pgvector":
        from ragloop.retrieval.pgvector_index import PgVectorIndex

        return PgVectorIndex.load(directory)
    raise ValueError(f"vector index in {directory} has unknown backend {backend!r}")
