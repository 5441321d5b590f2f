"""Conversation memory: LangGraph checkpoints hold the trimmed working memory (recent messages +
rolling summary); the full uncut conversation is kept separately for display and evaluation.

Checkpointer: SQLite under RAGLOOP_HOME by default, PostgreSQL when the URL says so, thread id
per conversation. The conversation log is SQLAlchemy Core, so the same code serves both.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from sqlalchemy import (
    Column,
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

from ragloop.agent.types import (
    Citation,
    CycleRecord,
    Deficiency,
    DeficiencyType,
    KeptStrip,
    RetrievedChunk,
    TraceRecord,
)

# our types in the graph state; LangGraph loads only allow-listed types from a checkpoint (a warning
# now, blocked in strict mode and in future versions), so they are named explicitly
CHECKPOINT_TYPES = tuple(
    (t.__module__, t.__name__)
    for t in (Citation, CycleRecord, Deficiency, DeficiencyType, KeptStrip, RetrievedChunk, TraceRecord)
)


def checkpoint_serde() -> JsonPlusSerializer:
    return JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINT_TYPES)


_meta = MetaData()
conversation_log = Table(
    "conversation_log",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("thread_id", String(200), nullable=False, index=True),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("meta", Text, nullable=False, default="{}"),
    Column("at", Float, nullable=False),
)


class ConversationLog:
    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _wal)
        _meta.create_all(self.engine)

    def append(self, thread_id: str, role: str, content: str, meta: dict[str, Any] | None = None) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(conversation_log).values(
                    thread_id=thread_id,
                    role=role,
                    content=content,
                    meta=json.dumps(meta or {}),
                    at=time.time(),
                )
            )

    def messages(self, thread_id: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = (
                conn.execute(
                    select(conversation_log)
                    .where(conversation_log.c.thread_id == thread_id)
                    .order_by(conversation_log.c.id)
                )
                .mappings()
                .all()
            )
        return [
            {"role": r["role"], "content": r["content"], "meta": json.loads(r["meta"]), "at": r["at"]} for r in rows
        ]

    def threads(self) -> list[str]:
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(select(conversation_log.c.thread_id).distinct())]

    def delete(self, thread_id: str) -> int:
        with self.engine.begin() as conn:
            return conn.execute(delete(conversation_log).where(conversation_log.c.thread_id == thread_id)).rowcount

    def close(self) -> None:
        self.engine.dispose()


def _wal(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.execute("PRAGMA journal_mode=WAL")


@asynccontextmanager
async def open_checkpointer(url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """`sqlite:///path` (default) or `postgresql://...` (needs the `postgres` extra)."""
    if url.startswith("sqlite"):
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = url.split("///", 1)[1] if "///" in url else ":memory:"
        async with aiosqlite.connect(path, timeout=30) as db:
            if path != ":memory:":  # concurrent turns (the service) must not fail on a writer lock
                await db.execute("PRAGMA journal_mode=WAL")
            yield AsyncSqliteSaver(db, serde=checkpoint_serde())
    elif url.startswith(("postgresql", "postgres")):
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        conn = url.replace("postgresql+psycopg://", "postgresql://")
        async with AsyncPostgresSaver.from_conn_string(conn, serde=checkpoint_serde()) as saver:
            await saver.setup()
            yield saver
    else:
        raise ValueError(f"unsupported checkpointer URL {url!r}: use sqlite:///PATH or postgresql://...")
