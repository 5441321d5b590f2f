"""Conversation memory: LangGraph checkpoints hold the trimmed working memory (recent messages +
rolling summary); the full uncut conversation is kept separately for display and evaluation.

Checkpointer: SQLite under RAGLOOP_HOME by default, PostgreSQL when the URL says so, thread id
per conversation. The conversation log is SQLAlchemy Core, so the same code serves both.
`ConversationMemory` holds the two URLs; the service points both at its PostgreSQL database (when
it has one) so every instance on that database shares every conversation, and opens one
connection pool for the checkpoints for its lifetime.

Both are written without personal data: the log's messages go through the `Redactor`
(`ragloop.text.pii`), and every checkpointer made here is a redacting one
(`ragloop.agent.memory_redaction`).
"""

from __future__ import annotations

import asyncio
import json
import threading
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
    insert,
    select,
    text,
)

from ragloop.agent.details import DETAILS, OtherDetail
from ragloop.agent.memory_redaction import redacting, redacting_saver
from ragloop.agent.types import (
    Citation,
    CycleRecord,
    Deficiency,
    DeficiencyType,
    KeptStrip,
    RetrievedChunk,
    TraceRecord,
)
from ragloop.sqlite import BUSY_TIMEOUT_S, apply_pragmas_async, is_memory, sqlite_engine
from ragloop.text.pii import Redactor, default_redactor

# our types in the graph state; LangGraph loads only allow-listed types from a checkpoint (a warning
# now, blocked in strict mode and in future versions), so they are named explicitly
CHECKPOINT_TYPES = tuple(
    (t.__module__, t.__name__)
    for t in (
        Citation,
        CycleRecord,
        Deficiency,
        DeficiencyType,
        KeptStrip,
        RetrievedChunk,
        TraceRecord,
        OtherDetail,
        *DETAILS.values(),
    )
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


# serialise the first-time creation of the memory tables on one PostgreSQL database (instances
# starting together would otherwise race on CREATE TABLE IF NOT EXISTS); two keys, see _setup_postgres
_PG_LOG_LOCK = 0x7261676C6C6F67  # "ragllog"
_PG_CHECKPOINT_LOCK = 0x7261676C63707400  # "raglcpt"
SETUP_WAIT_S = 120.0


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql", "postgres:"))


def _sqlalchemy_url(url: str) -> str:
    """`postgresql://` and `postgres://` mean psycopg 3 (the driver the `postgres` extra installs)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _libpq_url(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as psycopg's own connection string."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


class ConversationLog:
    """Every message of every thread, uncut: SQLite (`sqlite:///path`) or PostgreSQL (`postgresql://...`)."""

    def __init__(self, url: str, redactor: Redactor | None = None) -> None:
        self.redactor = redactor or default_redactor()
        url = _sqlalchemy_url(url)
        if url.startswith("sqlite"):
            # durability "full": every message of a user's history (see ragloop.sqlite for the policy)
            self.engine = sqlite_engine(url, durability="full")
        else:
            self.engine = create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=8)
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOG_LOCK})
            _meta.create_all(conn)

    def append(self, thread_id: str, role: str, content: str, meta: dict[str, Any] | None = None) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(conversation_log).values(
                    thread_id=thread_id,
                    role=role,
                    content=self.redactor.redact(content),
                    meta=json.dumps(self.redactor.redact_deep(meta or {})),
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


@asynccontextmanager
async def open_checkpointer(
    url: str, *, setup: bool = True, redactor: Redactor | None = None
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """`sqlite:///path` (default) or `postgresql://...` (needs the `postgres` extra): one connection
    for the block. `setup=False` skips creating/migrating the PostgreSQL tables (already done).
    What it writes is redacted by `redactor` (default: the environment's)."""
    redactor = redactor or default_redactor()
    if url.startswith("sqlite"):
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = url.split("///", 1)[1] if "///" in url else ":memory:"
        async with aiosqlite.connect(path, timeout=BUSY_TIMEOUT_S) as db:
            # concurrent turns (the service) must not fail on a writer lock: WAL and the busy timeout;
            # durability "full": a conversation's state (see ragloop.sqlite for the policy)
            await apply_pragmas_async(db, durability="full", wal=not is_memory(path))
            yield redacting_saver(AsyncSqliteSaver, redactor, db, serde=checkpoint_serde())
    elif is_postgres(url):
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        conn = _libpq_url(url)
        async with redacting(AsyncPostgresSaver).from_conn_string(conn, serde=checkpoint_serde()) as saver:
            saver.redactor = redactor
            if setup:
                await _setup_postgres(saver, conn)
            yield saver
    else:
        raise ValueError(f"unsupported checkpointer URL {url!r}: use sqlite:///PATH or postgresql://...")


async def _setup_postgres(saver: Any, conninfo: str) -> None:
    """LangGraph's table setup, one process at a time. The lock is polled, never waited for: a session
    waiting inside `pg_advisory_lock` holds a snapshot, LangGraph's `CREATE INDEX CONCURRENTLY`
    waits for every older snapshot, and the lock holder waits for its index: a deadlock no
    server can see (it runs through this client)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as lock:
        deadline = time.monotonic() + SETUP_WAIT_S
        while True:
            row = await (await lock.execute("SELECT pg_try_advisory_lock(%s)", (_PG_CHECKPOINT_LOCK,))).fetchone()
            if row is not None and row[0]:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"another process kept the checkpoint tables' setup lock for {SETUP_WAIT_S:.0f} s")
            await asyncio.sleep(0.05)
        try:
            await saver.setup()
        finally:
            await lock.execute("SELECT pg_advisory_unlock(%s)", (_PG_CHECKPOINT_LOCK,))


class ConversationMemory:
    """Where conversations live: LangGraph checkpoints (`checkpointer_url`) and the full message log
    (`log_url`), each SQLite or PostgreSQL.

    Closed (the default), every use opens its own checkpointer connection: right for the command
    line and for SQLite files. `aopen()`, called inside the event loop that will use it (the
    service's lifespan), keeps one PostgreSQL connection pool for the memory's lifetime instead of
    a connection and a schema check per turn; `aclose()` closes it. It does nothing for SQLite: a
    file connection is cheap, and one long-lived connection would funnel every turn through one
    aiosqlite thread.
    """

    def __init__(self, checkpointer_url: str, log_url: str, redactor: Redactor | None = None) -> None:
        self.redactor = redactor or default_redactor()
        self.checkpointer_url = checkpointer_url
        self.log_url = log_url
        self._log: ConversationLog | None = None
        self._log_lock = threading.Lock()
        self._pool: Any = None
        self._serde = checkpoint_serde()
        self._set_up = False

    @property
    def log(self) -> ConversationLog:
        with self._log_lock:
            if self._log is None:
                self._log = ConversationLog(self.log_url, self.redactor)
            return self._log

    @property
    def pooled(self) -> bool:
        return self._pool is not None

    async def aopen(self, *, pool_size: int = 4) -> None:
        """Open the PostgreSQL checkpointer pool (no-op for SQLite, or when open) and create the
        conversation log's table, so the first turn pays for neither."""
        await asyncio.to_thread(lambda: self.log)
        if self._pool is not None or not is_postgres(self.checkpointer_url):
            return
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        conninfo = _libpq_url(self.checkpointer_url)
        pool: Any = AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(1, pool_size),
            open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        )
        await pool.open(wait=True, timeout=30)
        try:
            await _setup_postgres(AsyncPostgresSaver(pool, serde=self._serde), conninfo)
        except BaseException:
            await pool.close()
            raise
        self._pool, self._set_up = pool, True

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @asynccontextmanager
    async def checkpointer(self) -> AsyncIterator[BaseCheckpointSaver[Any]]:
        """A saver over the pool when open, else on a connection of its own for the block.

        Over the pool, each block gets its own saver object (no I/O to make one): a saver runs its
        operations one at a time under an asyncio lock, so one saver shared by every turn would
        serialise all of them; one per turn lets turns proceed in parallel on pooled connections."""
        if self._pool is not None:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            yield redacting_saver(AsyncPostgresSaver, self.redactor, self._pool, serde=self._serde)
            return
        async with open_checkpointer(self.checkpointer_url, setup=not self._set_up, redactor=self.redactor) as saver:
            self._set_up = True
            yield saver

    async def forget(self, thread_id: str) -> None:
        """Delete a conversation: its checkpoints and its full message log."""
        async with self.checkpointer() as saver:
            await saver.adelete_thread(thread_id)
        await asyncio.to_thread(self.log.delete, thread_id)

    def close(self) -> None:
        with self._log_lock:
            if self._log is not None:
                self._log.close()
                self._log = None
