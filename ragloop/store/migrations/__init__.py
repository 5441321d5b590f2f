"""Alembic migrations shipped inside the package, applied programmatically (no alembic.ini at run time).

`upgrade(url)` is what `ragloop db upgrade` and the service's start-up call: it creates every
table on a fresh database and is a no-op on an up-to-date one. Concurrent upgraders (a server and
its workers starting together) are serialised: PostgreSQL by an advisory lock, SQLite by taking
the write lock before Alembic looks at the version table.

To write a new migration against a scratch database::

    alembic -c <(python -c 'from ragloop.store.migrations import alembic_ini; print(alembic_ini())') \\
        revision --autogenerate -m "what changed"
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL, Connection

from ragloop.store.db import make_engine, write_engine

MIGRATIONS_DIR = Path(__file__).resolve().parent
_LOCK_KEY = 0x7261676C6F6F70  # "ragloop"


def alembic_config(url: str | None = None) -> Config:
    """An Alembic `Config` pointing at the shipped scripts (and at `url`, for the command line)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def alembic_ini(url: str | None = None) -> str:
    """The text of an alembic.ini for developers who want the `alembic` command line."""
    lines = ["[alembic]", f"script_location = {MIGRATIONS_DIR}"]
    if url:
        lines.append(f"sqlalchemy.url = {url.replace('%', '%%')}")
    return "\n".join(lines) + "\n"


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations shipped"
    return head


@contextmanager
def _migration_connection(target: str | URL | Engine | None) -> Iterator[Connection]:
    engine = target if isinstance(target, Engine) else make_engine(target)
    try:
        with write_engine(engine).begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            yield conn
    finally:
        if engine is not target:
            engine.dispose()


def upgrade(url: str | URL | Engine | None = None, revision: str = "head") -> str | None:
    """Apply the migrations up to `revision` in one transaction; returns the revision now current.

    `url` defaults to `RAGLOOP_DATABASE_URL` or the SQLite file under `RAGLOOP_HOME`.
    """
    with _migration_connection(url) as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        return MigrationContext.configure(conn).get_current_revision()


def downgrade(url: str | URL | Engine | None, revision: str) -> str | None:
    """Undo migrations down to `revision` ("base" drops everything ragloop created)."""
    with _migration_connection(url) as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)
        return MigrationContext.configure(conn).get_current_revision()


def current_revision(url: str | URL | Engine | None = None) -> str | None:
    """The revision the database is at (None for a database ragloop has never migrated)."""
    engine = url if isinstance(url, Engine) else make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        if engine is not url:
            engine.dispose()


__all__ = [
    "MIGRATIONS_DIR",
    "alembic_config",
    "alembic_ini",
    "current_revision",
    "downgrade",
    "head_revision",
    "upgrade",
]
