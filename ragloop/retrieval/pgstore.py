"""Collections in PostgreSQL (`RAGLOOP_COLLECTIONS_URL`): one knowledge base for every instance.

Each collection is one schema, `rlkb_<slug>_<hash>` (any collection name maps to a safe, unique
identifier under PostgreSQL's 63-byte limit). It holds the registry's own tables (files, state,
per-document overrides, pins, semantic expansions: `ragloop.ingest.registry`'s Table definitions,
reused through `schema_translate_map`) and the generations:

- `generations`: one row per stored generation, its manifest (JSON);
- `chunks`: one row per chunk and generation: the chunk (JSON), and its vector as float32 bytes;
- `sources`: uploaded source files by registry rel (`write_sources`, in the transaction that
  switches the generation), so every instance can re-upload, delete and re-chunk them;
- `generation_files`: the BM25 index (and an ANN graph, when the generation has one) as the
  same files the embedded backend writes, one `bytea` each.

Why BM25 is stored, not computed in SQL: the bytes come from the very builder the embedded
backend runs (`build_generation`), so the lexical side scores exactly as it does on files
(identical hybrid quality, nothing to re-measure), and opening a generation costs a read, not a
rebuild. Vectors are searched in memory after load (`ExactIndex`, or the stored usearch/faiss
graph), like the embedded backend. A vector index that lives in the database itself (pgvector's
HNSW, `ragloop.retrieval.pgvector_index.PgVectorDatabaseBackend`) plugs in as a
`DatabaseVectorBackend` under its `dense.backend` name: staging then calls its `write` in the
generation's transaction (rows and graph commit or vanish with the chunks), loading asks it to
`open` a `VectorIndex` instead of building one in memory, and deleting a generation drops it.
On a server without the extension (`available` false) the generation falls back to exact search.
`dense.backend: auto` picks pgvector wherever the server has it (`PgStorage._dense_choice`).

Atomicity is the seam's (`ragloop.retrieval.storage`): `stage` commits the generation's rows in
one transaction while the registry still names the old generation; `Collection` then moves the
pointer in one registry transaction. Readers load the generation the pointer names inside one
REPEATABLE READ transaction, so they never see half of one. The writer lock is a session-level
advisory lock on a dedicated connection: it spans processes and machines, and dies with a
crashed writer's connection.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Protocol

import numpy as np
from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    delete,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.pool import NullPool

from ragloop.ingest.registry import Registry, state_table
from ragloop.ingest.registry import metadata as registry_metadata
from ragloop.ingest.types import Chunk
from ragloop.retrieval.dense import VectorIndex
from ragloop.retrieval.storage import GenerationGone
from ragloop.retrieval.store import IndexGeneration, IndexSpec, Manifest, build_generation, open_indexes
from ragloop.store.db import normalize_url

log = logging.getLogger(__name__)

SCHEMA_PREFIX = "rlkb_"
NAME_KEY = "collection_name"
INSERT_BATCH = 1000

generation_metadata = MetaData()

generations_table = Table(
    "generations",
    generation_metadata,
    Column("generation", Integer, primary_key=True),
    Column("manifest", Text, nullable=False),
)

chunks_table = Table(
    "chunks",
    generation_metadata,
    Column("generation", Integer, primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("chunk_id", String, nullable=False),
    Column("chunk", Text, nullable=False),
    Column("vector", LargeBinary, nullable=False),
)

files_table = Table(
    "generation_files",
    generation_metadata,
    Column("generation", Integer, primary_key=True),
    Column("name", String, primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

sources_table = Table(
    "sources",
    generation_metadata,
    Column("rel", String, primary_key=True),
    Column("data", LargeBinary, nullable=False),
)


class DatabaseVectorBackend(Protocol):
    """A vector index kept in PostgreSQL itself (pgvector's HNSW), named by `dense.backend`."""

    name: str

    def available(self, conn: Connection) -> bool:
        """Whether this database can hold it (else the generation is searched in memory, exact)."""
        ...

    def write(self, conn: Connection, schema: str, generation: int, vectors: np.ndarray) -> None:
        """Index `vectors` (row i = chunk position i) inside the staging transaction."""
        ...

    def open(self, engine: Engine, schema: str, generation: int, dim: int) -> VectorIndex:
        """A `VectorIndex` that searches the stored generation in the database."""
        ...

    def delete(self, conn: Connection, schema: str, generations: Sequence[int]) -> None:
        """Drop what `write` stored for these generations (pruned or discarded)."""
        ...


DATABASE_VECTOR_BACKENDS: dict[str, DatabaseVectorBackend] = {}


def register_database_vector_backend(backend: DatabaseVectorBackend) -> None:
    """Make `dense.backend = backend.name` store and search vectors in the database."""
    DATABASE_VECTOR_BACKENDS[backend.name] = backend


def database_vector_backend(name: str) -> DatabaseVectorBackend | None:
    """The in-database index registered as `name`; pgvector's is registered on first use, so
    psycopg-only installs never import it."""
    if name == "pgvector" and name not in DATABASE_VECTOR_BACKENDS:
        from ragloop.retrieval.pgvector_index import PgVectorDatabaseBackend

        register_database_vector_backend(PgVectorDatabaseBackend())
    return DATABASE_VECTOR_BACKENDS.get(name)


def schema_for(name: str) -> str:
    """A lower-case identifier no other collection name maps to (the hash keeps `A` and `a`,
    `x.y` and `x_y` apart)."""
    slug = re.sub(r"[^a-z0-9_]", "_", name.lower())[:40]
    return f"{SCHEMA_PREFIX}{slug}_{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def _lock_key(schema: str) -> int:
    return int.from_bytes(hashlib.sha256(f"ragloop.kb:{schema}".encode()).digest()[:8], "big", signed=True)


def _engine(url: str, **kwargs: object) -> Engine:
    return create_engine(normalize_url(url), pool_pre_ping=True, **kwargs)


class PgStorage:
    """One collection's schema (see the module docstring)."""

    shared = True

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = normalize_url(url)
        self.schema = schema_for(name)
        self._base = _engine(self.url, pool_size=2, max_overflow=4)
        self.engine = self._base.execution_options(schema_translate_map={None: self.schema})
        self._registry: Registry | None = None
        self._pgvector: bool | None = None  # has this server the vector extension (asked once)
        self._seen = False
        # a storage dropped without close() still returns its connections (psycopg warns otherwise)
        self._finalizer = weakref.finalize(self, self._base.dispose)

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._create()
            self._registry = Registry(self.url, engine=self.engine)
        return self._registry

    def _create(self) -> None:
        """Schema and tables, once: concurrent first openers wait on a transaction-scoped lock
        instead of racing on `CREATE` (which PostgreSQL answers with a unique violation)."""
        with self._base.begin() as conn:
            conn.execute(select(func.pg_advisory_xact_lock(_lock_key(self.schema))))
            conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"'))
            conn.execution_options(schema_translate_map={None: self.schema})
            registry_metadata.create_all(conn)
            generation_metadata.create_all(conn)
            known = conn.execute(select(state_table.c.value).where(state_table.c.key == NAME_KEY)).scalar()
            if known is None:
                conn.execute(insert(state_table).values(key=NAME_KEY, value=self.name))

    def exists(self) -> bool:
        """Asked before every read of the pointer: once seen, a collection's schema is taken to
        stay, which saves a round trip per question. Only index variants are ever dropped, and
        their holders reopen on the error a dropped schema raises (`IndexVariant.behind`)."""
        if not self._seen:
            with self._base.connect() as conn:
                self._seen = conn.execute(select(func.to_regclass(f'"{self.schema}".state'))).scalar() is not None
        return self._seen

    @contextmanager
    def writer_lock(self) -> Iterator[None]:
        key = _lock_key(f"writer:{self.schema}")
        with self._base.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(select(func.pg_advisory_lock(key)))
            try:
                yield
            finally:
                conn.execute(select(func.pg_advisory_unlock(key)))

    def drop(self) -> None:
        with self.writer_lock(), self._base.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))
        self._registry = None
        self._seen = False

    # generations ---------------------------------------------------------------------------
    def _dense_choice(self, backend: str) -> str:
        """`auto` means pgvector on a server that has the extension: the one shared index the
        scale-out design asks for, searched in SQL by every instance; elsewhere `auto` keeps
        its embedded meaning (exact, usearch above the threshold)."""
        if backend != "auto":
            return backend
        if self._pgvector is None:
            pgvector = database_vector_backend("pgvector")
            with self.engine.connect() as conn:
                self._pgvector = pgvector is not None and pgvector.available(conn)
        return "pgvector" if self._pgvector else backend

    def stage(self, generation: int, chunks: list[Chunk], vectors: np.ndarray, spec: IndexSpec) -> None:
        db_index = database_vector_backend(self._dense_choice(spec.dense_backend))
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with tempfile.TemporaryDirectory(prefix="ragloop-pgstage-") as tmp:
            root = Path(tmp)
            manifest = build_generation(
                root, generation, chunks, vectors, replace(spec, dense_backend="exact") if db_index else spec
            )
            blobs = [
                {"generation": generation, "name": p.relative_to(root).as_posix(), "data": p.read_bytes()}
                for sub in ("bm25", "ann")
                for p in sorted((root / sub).rglob("*"))
                if p.is_file()
            ]
        self.registry  # noqa: B018 - the schema must exist before the first generation
        with self.engine.begin() as conn:
            self._delete(conn, [generation])
            if db_index is not None and not db_index.available(conn):
                log.warning("%s is not available in this database: %r is searched exactly", db_index.name, self.name)
                db_index = None
            if db_index is not None:
                manifest = replace(manifest, dense_backend=db_index.name)
            conn.execute(insert(generations_table).values(generation=generation, manifest=json.dumps(asdict(manifest))))
            for start in range(0, len(chunks), INSERT_BATCH):
                conn.execute(
                    insert(chunks_table),
                    [
                        {
                            "generation": generation,
                            "position": i,
                            "chunk_id": c.chunk_id,
                            "chunk": json.dumps(c.to_json(), ensure_ascii=False),
                            "vector": vectors[i].tobytes(),
                        }
                        for i, c in enumerate(chunks[start : start + INSERT_BATCH], start)
                    ],
                )
            if blobs:
                conn.execute(insert(files_table), blobs)
            if db_index is not None:
                db_index.write(conn, self.schema, generation, vectors)

    def discard(self, generation: int) -> None:
        if not self.exists():
            return
        with self.engine.begin() as conn:
            self._delete(conn, [generation])

    def _delete(self, conn: Connection, generations: Sequence[int]) -> None:
        if not generations:
            return
        held = conn.execute(
            select(generations_table.c.generation, generations_table.c.manifest).where(
                generations_table.c.generation.in_(list(generations))
            )
        ).all()
        for table in (chunks_table, files_table, generations_table):
            conn.execute(delete(table).where(table.c.generation.in_(list(generations))))
        # what an in-database index stored goes too: by the backend each generation names (a
        # staged orphan's manifest may be gone with a killed writer: ask every backend known here)
        named = {json.loads(raw).get("dense_backend", "") for _, raw in held}
        backends = {b for b in map(database_vector_backend, named) if b is not None}
        for db_index in backends | set(DATABASE_VECTOR_BACKENDS.values()):
            db_index.delete(conn, self.schema, generations)

    def _read(self, generation: int, with_files: bool) -> tuple[Manifest, list[Chunk], np.ndarray, dict[str, bytes]]:
        """One generation, read in one snapshot: a concurrent prune cannot leave it half-read."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                raw = conn.execute(
                    select(generations_table.c.manifest).where(generations_table.c.generation == generation)
                ).scalar()
                if raw is None:
                    raise GenerationGone(f"generation {generation} of {self.name!r} is not stored")
                rows = conn.execute(
                    select(chunks_table.c.chunk, chunks_table.c.vector)
                    .where(chunks_table.c.generation == generation)
                    .order_by(chunks_table.c.position)
                ).all()
                files: dict[str, bytes] = {}
                if with_files:
                    found = select(files_table.c.name, files_table.c.data).where(files_table.c.generation == generation)
                    files = {name: bytes(data) for name, data in conn.execute(found)}
        manifest = Manifest(**json.loads(raw))
        chunks = [Chunk.from_json(json.loads(r[0])) for r in rows]
        vectors = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32).reshape(len(rows), manifest.dim)
        return manifest, chunks, vectors, files

    def load(self, generation: int) -> IndexGeneration:
        manifest, chunks, vectors, files = self._read(generation, with_files=True)
        db_index = database_vector_backend(manifest.dense_backend)
        # the index files are opened (memory-mapped) from a private folder that is then removed:
        # the mappings outlive the names (POSIX), and nothing is left behind in any home
        with tempfile.TemporaryDirectory(prefix="ragloop-pgload-") as tmp:
            root = Path(tmp)
            for name, data in files.items():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_bytes(data)
            opened = replace(manifest, dense_backend="exact") if db_index else manifest
            bm25, vindex = open_indexes(root, opened, vectors)
        if db_index is not None:
            vindex = db_index.open(self.engine, self.schema, generation, manifest.dim)
        path = Path("postgresql") / self.schema / f"gen-{generation:06d}"
        return IndexGeneration(path, manifest, chunks, vectors, bm25, vindex)

    def rows(self, generation: int) -> tuple[list[Chunk], np.ndarray] | None:
        try:
            _, chunks, vectors, _ = self._read(generation, with_files=False)
        except GenerationGone:
            return None
        return chunks, vectors

    def prune(self, current: int) -> None:
        with self.engine.begin() as conn:
            stored = conn.execute(select(generations_table.c.generation)).scalars().all()
            self._delete(conn, [g for g in stored if g not in (current, current - 1)])

    def size_bytes(self, generation: int) -> int:
        total = 0
        with self.engine.connect() as conn:
            for column in (chunks_table.c.chunk, chunks_table.c.vector, files_table.c.data):
                size = select(func.coalesce(func.sum(func.pg_column_size(column)), 0))
                total += int(conn.execute(size.where(column.table.c.generation == generation)).scalar() or 0)
        return total

    # uploaded sources ------------------------------------------------------------------------
    def write_sources(self, conn: Connection, put: Mapping[str, bytes], drop: Iterable[str]) -> None:
        gone = set(drop) | set(put)
        if gone:
            conn.execute(delete(sources_table).where(sources_table.c.rel.in_(sorted(gone))))
        if put:
            conn.execute(insert(sources_table), [{"rel": rel, "data": data} for rel, data in put.items()])

    def source(self, rel: str) -> bytes | None:
        if not self.exists():
            return None
        self.registry  # noqa: B018 - a schema made before `sources` existed gets the table
        with self.engine.connect() as conn:
            data = conn.execute(select(sources_table.c.data).where(sources_table.c.rel == rel)).scalar()
        return None if data is None else bytes(data)

    def close(self) -> None:
        self._registry = None
        self._finalizer()


def pg_collection_names(url: str) -> list[str]:
    """Names of the collections stored in the database at `url` (each schema records its own)."""
    engine = _engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            schemas = conn.execute(
                text("SELECT nspname FROM pg_namespace WHERE nspname LIKE :p ORDER BY nspname"),
                {"p": SCHEMA_PREFIX.replace("_", "\\_") + "%"},
            ).scalars()
            names = []
            for schema in list(schemas):
                if conn.execute(select(func.to_regclass(f'"{schema}".state'))).scalar() is None:
                    continue
                name = conn.execute(
                    text(f'SELECT value FROM "{schema}".state WHERE key = :k'), {"k": NAME_KEY}
                ).scalar()
                if name is not None and schema_for(name) == schema:
                    names.append(name)
    finally:
        engine.dispose()
    return sorted(names)
