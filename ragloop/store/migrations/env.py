"""Alembic environment for ragloop's store.

`ragloop.store.migrations.upgrade(url)` hands a connection (already in a transaction) through
`config.attributes["connection"]`; when run from the `alembic` command line instead (for
`alembic revision --autogenerate`, see `alembic_config`), the URL comes from `sqlalchemy.url`
or `RAGLOOP_DATABASE_URL`.

Autogenerate compares only ragloop's own tables: the database may also hold tables that other
parts create there (the agent's checkpoints and conversation log, when the service keeps
conversation memory in its PostgreSQL database), and a migration must never drop those.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

import ragloop.store.document_models  # registers document_jobs on Base.metadata
import ragloop.store.golden_models
import ragloop.store.improve_models  # noqa: F401  (registers the diagnosis and remediation tables)
from ragloop.store.db import make_engine
from ragloop.store.models import Base


def _ours(name: str | None, type_: str, _parent: MutableMapping[Any, str | None]) -> bool:
    return type_ != "table" or name in Base.metadata.tables


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=_ours,
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or None)
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


_main()
