"""The document registry: which source files a collection holds, by content hash.

It is the record of what the *committed* index contains. The index generation a collection
serves is stored here too, and both change in one transaction, so a crash either leaves the old
files + old generation or the new files + new generation: never a mix.
SQLite by default; any SQLAlchemy URL works (PostgreSQL for a shared registry).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import (
    Column,
    Connection,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    delete,
    event,
    insert,
    select,
)
from sqlalchemy.engine import Engine

metadata = MetaData()

files_table = Table(
    "files",
    metadata,
    Column("rel", String, primary_key=True),
    Column("root", Text, nullable=False),
    Column("size", Integer, nullable=False),
    Column("mtime_ns", Integer, nullable=False),
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


def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
    cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


class Registry:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = create_engine(url)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        metadata.create_all(self.engine)

    @classmethod
    def for_directory(cls, directory: Path) -> Registry:
        directory.mkdir(parents=True, exist_ok=True)
        return cls(f"sqlite:///{directory / 'registry.sqlite'}")

    def close(self) -> None:
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


def normalize_query(query: str) -> str:
    """Case and whitespace do not make a different question."""
    return " ".join(query.lower().split())
