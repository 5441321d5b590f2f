"""The document registry: which source files a collection holds, by content hash.

It is the record of what the *committed* index contains. The index generation a collection
serves is stored here too, and both change in one transaction, so a crash either leaves the old
files + old generation or the new files + new generation: never a mix.
SQLite by default; any SQLAlchemy URL works (PostgreSQL for a shared registry).

Two kinds of remediation state live here too, because they belong to the index: per-document
chunking overrides (a re-chunked document keeps its size/overlap through later ingests, without
changing the collection's index fingerprint) and the semantic query-expansion entries (a failed
query's embedding with the chunks to pre-load), versioned so readers refresh only on a change.
"""

from __future__ import annotations

import glob
import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    delete,
    insert,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError, ProgrammingError

from ragloop.config.pipeline import ChunkingConfig, ChunkOverride
from ragloop.sqlite import sqlite_engine

metadata = MetaData()

files_table = Table(
    "files",
    metadata,
    Column("rel", String, primary_key=True),
    Column("root", Text, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("mtime_ns", BigInteger, nullable=False),  # nanoseconds since 1970 overflow PostgreSQL's int4
    Column("content_hash", String(64), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("n_docs", Integer, nullable=False),
    Column("n_chunks", Integer, nullable=False),
    Column("ingested_at", Float, nullable=False),
)

state_table = Table(
    "state",
    metadata,
    Column("key", String, primary_key=True),
    Column("value", Text, nullable=False),
)

expansions_table = Table(
    "expansions",
    metadata,
    Column("query", Text, primary_key=True),
    Column("chunk_ids", Text, nullable=False),
    Column("source", String, nullable=False),
    Column("created_at", Float, nullable=False),
)

document_overrides_table = Table(
    "document_overrides",
    metadata,
    Column("rel", String, primary_key=True),
    Column("size", Integer, nullable=False),
    Column("overlap", Integer, nullable=False),
    Column("source", String, nullable=False),
    Column("created_at", Float, nullable=False),
)

semantic_expansions_table = Table(
    "semantic_expansions",
    metadata,
    Column("entry_id", String, primary_key=True),
    Column("query", Text, nullable=False),
    Column("embedder", String, nullable=False),
    Column("vector", LargeBinary, nullable=False),
    Column("chunk_ids", Text, nullable=False),
    Column("source", String, nullable=False),
    Column("created_at", Float, nullable=False),
)

SEMANTIC_VERSION_KEY = "semantic_expansions_version"


@dataclass(frozen=True)
class DocumentOverride:
    """Chunking of one document, set by a re-chunk remediation.

    `rel` is the document's id: the path as registered for a single-document file (the override
    applies to the whole file), or `path#record` for one record of a multi-record file (JSON lines,
    a JSON list), exactly the doc id its chunks carry, so the `document_overrides` table needs no
    second key column. `ChunkingConfig.for_record` applies a record's override to that record only;
    `ragloop.retrieval.rechunk` refuses an id that is both a registered path and a record's id."""

    rel: str
    size: int
    overlap: int
    source: str = "manual"


@dataclass(frozen=True)
class SemanticExpansion:
    """A query's embedding (float32 bytes, by `embedder`) and the chunk ids to pre-load for it."""

    entry_id: str
    query: str
    embedder: str
    vector: bytes
    chunk_ids: tuple[str, ...]
    source: str
    created_at: float


@dataclass(frozen=True)
class FileRecord:
    rel: str
    root: str
    size: int
    mtime_ns: int
    content_hash: str
    fingerprint: str
    n_docs: int
    n_chunks: int
    ingested_at: float


def create_tables(engine: Engine, attempts: int = 3) -> None:
    """Create the registry's tables, tolerating another process doing the same at that moment.

    A server and a worker opening a new collection at once both find no table and both CREATE it;
    the loser's "already exists" only means the winner made it, so it looks again rather than
    dying at start-up.
    """
    for attempt in range(attempts):
        try:
            metadata.create_all(engine)
            return
        except (OperationalError, ProgrammingError) as exc:
            if "already exists" not in str(exc) or attempt == attempts - 1:
                raise


class Registry:
    def __init__(self, url: str, *, engine: Engine | None = None) -> None:
        """`engine`: an engine the caller owns and has created the tables on (the PostgreSQL
        collection storage passes one with its schema translated, see `ragloop.retrieval.pgstore`)."""
        self.url = url
        self._owns_engine = engine is None
        if engine is None:
            # durability "full": the registry says which files are indexed and must not lose an acknowledged
            # commit on power loss (see ragloop.sqlite for the policy)
            engine = sqlite_engine(url, durability="full") if url.startswith("sqlite") else create_engine(url)
            create_tables(engine)
        self.engine: Engine = engine

    @classmethod
    def for_directory(cls, directory: Path) -> Registry:
        directory.mkdir(parents=True, exist_ok=True)
        return cls(f"sqlite:///{directory / 'registry.sqlite'}")

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    # reads -----------------------------------------------------------------------------
    def files(self) -> dict[str, FileRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(files_table)).mappings().all()
        return {r["rel"]: FileRecord(**r) for r in rows}

    def get_state(self, key: str, default: str | None = None) -> str | None:
        with self.engine.connect() as conn:
            value = conn.execute(select(state_table.c.value).where(state_table.c.key == key)).scalar()
        return default if value is None else str(value)

    # writes: one transaction per commit of an index generation ----------------------------
    @contextmanager
    def transaction(self) -> Iterator[RegistryTxn]:
        with self.engine.begin() as conn:
            yield RegistryTxn(conn)

    # query-expansion cache: query -> pinned chunk ids -------------------------------------
    def pinned(self, query: str) -> list[str]:
        with self.engine.connect() as conn:
            raw = conn.execute(
                select(expansions_table.c.chunk_ids).where(expansions_table.c.query == normalize_query(query))
            ).scalar()
        return list(json.loads(raw)) if raw else []

    def pin(self, query: str, chunk_ids: Iterable[str], source: str = "manual") -> None:
        q = normalize_query(query)
        with self.engine.begin() as conn:
            conn.execute(delete(expansions_table).where(expansions_table.c.query == q))
            conn.execute(
                insert(expansions_table).values(
                    query=q, chunk_ids=json.dumps(list(chunk_ids)), source=source, created_at=time.time()
                )
            )

    # per-document chunking overrides ------------------------------------------------------
    def document_overrides(self) -> dict[str, DocumentOverride]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(document_overrides_table)).mappings().all()
        return {
            r["rel"]: DocumentOverride(rel=r["rel"], size=r["size"], overlap=r["overlap"], source=r["source"])
            for r in rows
        }

    def chunking_for(
        self, base: ChunkingConfig, overrides: dict[str, DocumentOverride] | None = None
    ) -> ChunkingConfig:
        """`base` with this collection's per-document overrides (or `overrides`) appended, so they win
        (sorted by id, so a file's override comes before its records' `path#record` ones)."""
        found = self.document_overrides() if overrides is None else overrides
        extra = tuple(
            ChunkOverride(glob=glob.escape(o.rel), size=o.size, overlap=o.overlap)
            for o in sorted(found.values(), key=lambda o: o.rel)
        )
        return base.model_copy(update={"overrides": base.overrides + extra}) if extra else base

    # semantic query-expansion entries --------------------------------------------------------
    def semantic_expansions(self) -> list[SemanticExpansion]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(semantic_expansions_table).order_by("entry_id")).mappings().all()
        return [
            SemanticExpansion(
                entry_id=r["entry_id"],
                query=r["query"],
                embedder=r["embedder"],
                vector=bytes(r["vector"]),
                chunk_ids=tuple(json.loads(r["chunk_ids"])),
                source=r["source"],
                created_at=r["created_at"],
            )
            for r in rows
        ]

    def semantic_version(self) -> int:
        return int(self.get_state(SEMANTIC_VERSION_KEY, "0") or 0)

    def put_semantic_expansion(self, entry: SemanticExpansion) -> int:
        """Insert or replace one entry and bump the version in one transaction; the new version."""
        with self.transaction() as txn:
            txn.conn.execute(
                delete(semantic_expansions_table).where(semantic_expansions_table.c.entry_id == entry.entry_id)
            )
            txn.conn.execute(
                insert(semantic_expansions_table).values(
                    entry_id=entry.entry_id,
                    query=entry.query,
                    embedder=entry.embedder,
                    vector=entry.vector,
                    chunk_ids=json.dumps(list(entry.chunk_ids)),
                    source=entry.source,
                    created_at=entry.created_at,
                )
            )
            return txn.bump_semantic_version()

    def delete_semantic_expansion(self, entry_id: str) -> bool:
        with self.transaction() as txn:
            gone = txn.conn.execute(
                delete(semantic_expansions_table).where(semantic_expansions_table.c.entry_id == entry_id)
            ).rowcount
            if gone:
                txn.bump_semantic_version()
            return bool(gone)


class RegistryTxn:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def upsert_file(self, record: FileRecord) -> None:
        self.conn.execute(delete(files_table).where(files_table.c.rel == record.rel))
        self.conn.execute(insert(files_table).values(**record.__dict__))

    def delete_file(self, rel: str) -> None:
        self.conn.execute(delete(files_table).where(files_table.c.rel == rel))

    def set_state(self, key: str, value: str) -> None:
        self.conn.execute(delete(state_table).where(state_table.c.key == key))
        self.conn.execute(insert(state_table).values(key=key, value=value))

    def delete_state(self, key: str) -> None:
        self.conn.execute(delete(state_table).where(state_table.c.key == key))

    def set_document_override(self, override: DocumentOverride) -> None:
        self.clear_document_override(override.rel)
        self.conn.execute(
            insert(document_overrides_table).values(
                rel=override.rel,
                size=override.size,
                overlap=override.overlap,
                source=override.source,
                created_at=time.time(),
            )
        )

    def clear_document_override(self, rel: str) -> None:
        self.conn.execute(delete(document_overrides_table).where(document_overrides_table.c.rel == rel))

    def bump_semantic_version(self) -> int:
        raw = self.conn.execute(select(state_table.c.value).where(state_table.c.key == SEMANTIC_VERSION_KEY)).scalar()
        version = int(raw or 0) + 1
        self.set_state(SEMANTIC_VERSION_KEY, str(version))
        return version


def normalize_query(query: str) -> str:
    """Case and whitespace do not make a different question."""
    return " ".join(query.lower().split())
