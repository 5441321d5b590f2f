"""Run-time settings (`service_settings`): one JSON object per key, set by an admin through the API
or the CLI and read by every server and CLI on the same database. A stored setting overrides the
environment's default; deleting it returns to that default."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select

from ragloop.store.db import Database
from ragloop.store.models import ServiceSetting, utcnow


class ServiceSettings:
    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, key: str) -> dict[str, Any] | None:
        with self.db.transaction(write=False) as s:
            row = s.get(ServiceSetting, key)
            return dict(row.value) if row is not None else None

    def updated(self, key: str) -> tuple[str, datetime] | None:
        """(who, when) of the stored value; None when the key is unset."""
        with self.db.transaction(write=False) as s:
            row = s.execute(
                select(ServiceSetting.updated_by, ServiceSetting.updated_at).where(ServiceSetting.key == key)
            ).first()
            return (row[0], row[1]) if row is not None else None

    def set(self, key: str, value: Mapping[str, Any], *, actor: str = "system") -> None:
        """Insert or replace `key` (joins the caller's transaction, e.g. with its audit entry)."""
        with self.db.transaction() as s:
            row = s.get(ServiceSetting, key)
            if row is None:
                s.add(ServiceSetting(key=key, value=dict(value), updated_by=actor, updated_at=utcnow()))
            else:
                row.value, row.updated_by, row.updated_at = dict(value), actor, utcnow()

    def delete(self, key: str) -> bool:
        """Unset `key`; False when it was not set."""
        with self.db.transaction() as s:
            return bool(getattr(s.execute(delete(ServiceSetting).where(ServiceSetting.key == key)), "rowcount", 0))
