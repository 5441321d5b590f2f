"""One way to open a SQLite database: every ragloop SQLite file gets the same connection policy.

The lowest layer (it imports only the standard library and SQLAlchemy), so the store, the ingest
registry, the chat-response and embedding caches, and the agent's memory all open their files here.

The policy, on every connection:
- `journal_mode=WAL`: readers never block the writer and the writer never blocks readers (the
  service reads while a worker writes); skipped for in-memory databases, which cannot use it.
- a busy timeout (`BUSY_TIMEOUT_S` unless a caller needs another): a competing writer's lock costs
  a wait, not a `database is locked` error. Set both on the driver (`timeout=`) and as a PRAGMA, so
  it holds however the connection is used.
- `foreign_keys=ON`: declared references are enforced (SQLite leaves them off by default).
- `synchronous`, chosen per use with `durability`:
  - `"normal"` (`synchronous=NORMAL`): in WAL mode a commit is not fsynced; the database stays
    consistent through any crash, but a power loss (or OS crash) can drop the last transactions.
    For data that is a cache, is re-derivable, or whose loss costs little: embedding and chat-response
    caches, and the service store (answers, evaluations, the job queue, the model call log: written
    on the request path, where an fsync per commit is latency; a killed process loses nothing committed).
  - `"full"` (`synchronous=FULL`): every commit is fsynced before it returns. For records that
    must not be lost once acknowledged, or that must stay in step with files written beside them:
    the ingest registry (it says which files are indexed; losing a commit would make the index and
    the registry disagree), the conversation log and the LangGraph checkpoints (a user's history).
    This is also SQLite's own default, which those files had before this helper existed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

BUSY_TIMEOUT_S = 30.0

Durability = Literal["normal", "full"]

_SYNCHRONOUS: dict[str, str] = {"normal": "NORMAL", "full": "FULL"}


def is_memory(database: str | None) -> bool:
    """True for SQLite's in-memory databases (`:memory:`, `file::memory:`, `mode=memory`, or none)."""
    return not database or database == ":memory:" or database.startswith("file::memory:") or "mode=memory" in database


def pragmas(
    *, durability: Durability, busy_timeout_s: float = BUSY_TIMEOUT_S, foreign_keys: bool = True, wal: bool = True
) -> list[str]:
    """The PRAGMA statements of the policy, in the order they run."""
    if durability not in _SYNCHRONOUS:
        raise ValueError(f"durability must be 'normal' or 'full', not {durability!r}")
    out = ["PRAGMA journal_mode=WAL"] if wal else []
    out.append(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
    out.append(f"PRAGMA synchronous={_SYNCHRONOUS[durability]}")
    out.append(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
    return out


def apply_pragmas(
    dbapi_connection: Any,
    *,
    durability: Durability,
    busy_timeout_s: float = BUSY_TIMEOUT_S,
    foreign_keys: bool = True,
    wal: bool = True,
) -> None:
    """Run the policy's PRAGMAs on an open DB-API connection (`sqlite3.Connection` or SQLAlchemy's wrapper)."""
    cursor = dbapi_connection.cursor()
    try:
        for stmt in pragmas(durability=durability, busy_timeout_s=busy_timeout_s, foreign_keys=foreign_keys, wal=wal):
            cursor.execute(stmt)
    finally:
        cursor.close()


def connect(
    path: str | Path,
    *,
    durability: Durability,
    busy_timeout_s: float = BUSY_TIMEOUT_S,
    foreign_keys: bool = True,
    check_same_thread: bool = False,
) -> sqlite3.Connection:
    """A plain `sqlite3` connection under the policy; the parent directory is created for a file."""
    database = str(path)
    if not is_memory(database):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(database, check_same_thread=check_same_thread, timeout=busy_timeout_s)
    apply_pragmas(
        conn,
        durability=durability,
        busy_timeout_s=busy_timeout_s,
        foreign_keys=foreign_keys,
        wal=not is_memory(database),
    )
    return conn


async def apply_pragmas_async(
    db: Any,
    *,
    durability: Durability,
    busy_timeout_s: float = BUSY_TIMEOUT_S,
    foreign_keys: bool = True,
    wal: bool = True,
) -> None:
    """The policy on an open `aiosqlite` connection (the LangGraph checkpointer's)."""
    for stmt in pragmas(durability=durability, busy_timeout_s=busy_timeout_s, foreign_keys=foreign_keys, wal=wal):
        await db.execute(stmt)


def sqlite_engine(
    url: str | URL,
    *,
    durability: Durability,
    busy_timeout_s: float = BUSY_TIMEOUT_S,
    foreign_keys: bool = True,
    sqlalchemy_begin: bool = False,
    **engine_kwargs: Any,
) -> Engine:
    """A SQLAlchemy engine for a `sqlite:///` URL under the policy; the parent directory is created.

    `sqlalchemy_begin=True` switches the `sqlite3` module's legacy transaction control off
    (`isolation_level=None`) so the caller's own `begin` hook emits `BEGIN` (the store does, to
    take `BEGIN IMMEDIATE` for writes). `engine_kwargs` go to `create_engine` (pool sizes, echo).
    """
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        raise ValueError(f"not a SQLite URL: {u.render_as_string(hide_password=True)!r}")
    memory = is_memory(u.database)
    if not memory and u.database:
        Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    connect_args = {"timeout": busy_timeout_s, "check_same_thread": False, **engine_kwargs.pop("connect_args", {})}
    engine = create_engine(u, connect_args=connect_args, **engine_kwargs)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        if sqlalchemy_begin:
            dbapi_connection.isolation_level = None
        apply_pragmas(
            dbapi_connection,
            durability=durability,
            busy_timeout_s=busy_timeout_s,
            foreign_keys=foreign_keys,
            wal=not memory,
        )

    event.listen(engine, "connect", on_connect)
    return engine
