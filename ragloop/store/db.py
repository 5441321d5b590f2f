"""Engines and transactions: SQLite by default (one WAL file under `RAGLOOP_HOME`), PostgreSQL by URL.

Nothing here is a module global: `make_engine(url)` builds an engine, `Database` wraps one with
session factories, and the app factory (or a test) owns both.

Transactions are explicit. On SQLite SQLAlchemy emits `BEGIN` itself (the `sqlite3` module's
legacy transaction control is switched off), so DDL is transactional and a write transaction can
start with `BEGIN IMMEDIATE`: it takes the write lock up front, which turns "read, then write"
races into a short wait on the busy timeout instead of a `database is locked` error half-way.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.orm import Session, sessionmaker

from ragloop.config.settings import Settings
from ragloop.sqlite import BUSY_TIMEOUT_S, is_memory, sqlite_engine

DATABASE_URL_ENV = "RAGLOOP_DATABASE_URL"
SQLITE_FILENAME = "ragloop.db"
SQLITE_BUSY_TIMEOUT_S = BUSY_TIMEOUT_S  # the recorder's write budget is shorter than this

Dialect = Literal["sqlite", "postgresql"]

# execution option read by the SQLite `begin` hook: "IMMEDIATE" for write transactions
_BEGIN_OPTION = "ragloop_sqlite_begin"


def default_database_url(settings: Settings | None = None) -> str:
    """`RAGLOOP_DATABASE_URL` when set, else the SQLite file `RAGLOOP_HOME/ragloop.db`."""
    raw = os.environ.get(DATABASE_URL_ENV, "").strip()
    if raw:
        return normalize_url(raw)
    home = (settings or Settings.from_env()).home
    return f"sqlite:///{home / SQLITE_FILENAME}"


def normalize_url(url: str | URL) -> str:
    """`postgres://` and `postgresql://` mean psycopg 3 (the driver ragloop installs)."""
    u = make_url(url)
    if u.drivername in ("postgres", "postgresql"):
        u = u.set(drivername="postgresql+psycopg")
    return u.render_as_string(hide_password=False)


def dialect_of(url: str | URL) -> Dialect:
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return "sqlite"
    if backend == "postgresql":
        return "postgresql"
    raise ValueError(f"unsupported database {backend!r}: ragloop stores run on SQLite or PostgreSQL")


def make_engine(
    url: str | URL | None = None, *, pool_size: int = 5, max_overflow: int = 10, echo: bool = False
) -> Engine:
    """An engine for `url` (default: `default_database_url()`), configured for ragloop's access pattern.

    SQLite: the file (and its directory) is created on first use; `ragloop.sqlite`'s policy (WAL
    journal, foreign keys on, `synchronous=NORMAL`, busy timeout `SQLITE_BUSY_TIMEOUT_S`), and
    SQLAlchemy-controlled `BEGIN`. In-memory databases are
    refused: every pooled connection would see a different, empty database.
    PostgreSQL: psycopg 3, pre-ping so a restarted server costs one retry, not a 500.
    """
    resolved = normalize_url(url if url is not None else default_database_url())
    kind = dialect_of(resolved)
    if kind == "sqlite":
        return _sqlite_engine(make_url(resolved), pool_size=pool_size, max_overflow=max_overflow, echo=echo)
    return create_engine(
        resolved, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow, echo=echo, future=True
    )


def _sqlite_engine(url: URL, *, pool_size: int, max_overflow: int, echo: bool) -> Engine:
    if is_memory(url.database):
        raise ValueError("ragloop's SQLite store needs a file (sqlite:///path/ragloop.db), not an in-memory database")
    # durability "normal": see ragloop.sqlite for the policy and why the store takes NORMAL
    engine = sqlite_engine(
        url,
        durability="normal",
        busy_timeout_s=SQLITE_BUSY_TIMEOUT_S,
        sqlalchemy_begin=True,
        pool_size=pool_size,
        max_overflow=max_overflow,
        echo=echo,
    )
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get(_BEGIN_OPTION)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if mode == "IMMEDIATE" else "BEGIN")


def write_engine(engine: Engine) -> Engine:
    """The same pool, but transactions begin with the write lock held (SQLite); a no-op elsewhere."""
    if engine.dialect.name == "sqlite":
        return engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
    return engine


# The transaction a repository call joins, per Database, in this context (see Database.transaction), with the
# thread that opened it: a context copied into another thread (asyncio's to_thread, starlette's threadpool)
# must not join a session that belongs to a different thread.
_ambient: ContextVar[dict[int, tuple[Session, int]] | None] = ContextVar("ragloop_store_ambient", default=None)


class Database:
    """An engine plus session factories; every repository takes one.

    `transaction()` opens a unit of work and commits it on success. Repository calls made inside
    it join it instead of opening their own, so a caller can make several calls atomic::

        with db.transaction():
            evaluations.add(...)
            queue.complete(job.job_id, worker, job.lease_token)   # raises LeaseLost → both roll back
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect: Dialect = dialect_of(engine.url)
        self._read = sessionmaker(bind=engine, expire_on_commit=False)
        self._write = sessionmaker(bind=write_engine(engine), expire_on_commit=False)

    @classmethod
    def from_url(cls, url: str | URL | None = None, **engine_kwargs: Any) -> Database:
        return cls(make_engine(url, **engine_kwargs))

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Session]:
        """A session in a transaction, committed on success and rolled back on error.

        Nested calls in the same thread join the outer transaction (open the outer one with
        `write=True` if anything inside writes: on SQLite it holds the write lock from the start);
        another thread always gets its own transaction. `write=False` is for
        reads only: on SQLite it does not block writers, on PostgreSQL it is an ordinary transaction.
        """
        active = _ambient.get() or {}
        joined = active.get(id(self))
        if joined is not None and joined[1] == threading.get_ident():
            yield joined[0]
            return
        session = (self._write if write else self._read)()
        token = _ambient.set({**active, id(self): (session, threading.get_ident())})
        try:
            with session.begin():
                yield session
        finally:
            _ambient.reset(token)
            session.close()

    def ping(self) -> bool:
        """True when the database answers (for readiness probes)."""
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except Exception:
            return False

    def dispose(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        return f"Database({self.url!r})"
