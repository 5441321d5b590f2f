"""Alembic environment for ragloop's store.

`ragloop.store.migrations.upgrade(url)` hands a connection (already in a transaction) through
`config.attributes["connection"]`; when run from the `alembic` command line instead (for
`alembic revision --autogenerate`, see `alembic_config`), the URL comes from `sqlalchemy.url`
or `RAGLOOP_DATABASE_URL`.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from ragloop.store.db import make_engine
from ragloop.store.models import Base


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
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
