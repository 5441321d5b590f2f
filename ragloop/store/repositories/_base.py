"""What every repository shares: the errors callers catch, the row lookup that raises them, hashing,
and the writer lock. Kept private so the public names stay in one place (the package `__init__`)."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

METRICS = ("faithfulness", "answer_relevance", "context_precision", "context_recall")


class NotFoundError(LookupError):
    """The row a call names does not exist."""


class StoreConflictError(ValueError):
    """The call contradicts the stored state (revising a deprecated entry, nothing to roll back to…)."""


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def _serialize(session: Session, name: str) -> None:
    """Serialise writers of one kind: a transaction-scoped advisory lock on PostgreSQL. On SQLite
    write transactions already hold the database write lock (BEGIN IMMEDIATE)."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def _require(session: Session, model: type[Any], key: str) -> Any:
    row = session.get(model, key)
    if row is None:
        raise NotFoundError(f"no {model.__tablename__} row {key!r}")
    return row
