"""The improvement audit log. Its own module because it is insert-only and other repositories
(pipeline versions) write to it inside their own transactions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select

from ragloop.store.db import Database
from ragloop.store.models import ImprovementAuditLog


class AuditLog:
    """The improvement audit log: INSERT-only in the database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self,
        action_type: str,
        *,
        triggered_by: str,
        evidence: Mapping[str, Any],
        actor: str = "system",
        pipeline_version_before: str | None = None,
        pipeline_version_after: str | None = None,
        expected_delta: Mapping[str, Any] | None = None,
        actual_delta: Mapping[str, Any] | None = None,
        refers_to: str | None = None,
    ) -> ImprovementAuditLog:
        """Append one entry. A post-change measurement is its own entry with `refers_to` = the change."""
        with self.db.transaction() as s:
            row = ImprovementAuditLog(
                action_type=action_type,
                triggered_by=triggered_by,
                actor=actor,
                evidence=dict(evidence),
                pipeline_version_before=pipeline_version_before,
                pipeline_version_after=pipeline_version_after,
                expected_delta=dict(expected_delta) if expected_delta is not None else None,
                actual_delta=dict(actual_delta) if actual_delta is not None else None,
                refers_to=refers_to,
            )
            s.add(row)
            s.flush()
            return row

    def record_once(self, action_type: str, *, refers_to: str, **fields: Any) -> ImprovementAuditLog | None:
        """`record`, unless an entry of `action_type` already refers to `refers_to` (then None): a later
        measurement of one change is written once, even by two workers at the same moment."""
        from ragloop.store.repositories._base import _serialize

        with self.db.transaction() as s:
            _serialize(s, f"audit:{action_type}")
            taken = s.scalar(
                select(ImprovementAuditLog.log_id).where(
                    ImprovementAuditLog.action_type == action_type, ImprovementAuditLog.refers_to == refers_to
                )
            )
            return None if taken is not None else self.record(action_type, refers_to=refers_to, **fields)

    def get(self, log_id: str) -> ImprovementAuditLog | None:
        with self.db.transaction(write=False) as s:
            return s.get(ImprovementAuditLog, log_id)

    def timeline(
        self, *, action_type: str | None = None, since: datetime | None = None, limit: int = 100
    ) -> list[ImprovementAuditLog]:
        """Newest first."""
        stmt = select(ImprovementAuditLog)
        if action_type is not None:
            stmt = stmt.where(ImprovementAuditLog.action_type == action_type)
        if since is not None:
            stmt = stmt.where(ImprovementAuditLog.created_at >= since)
        stmt = stmt.order_by(ImprovementAuditLog.created_at.desc(), ImprovementAuditLog.log_id).limit(limit)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt))

    def measurements(self, log_id: str) -> list[ImprovementAuditLog]:
        """The entries that measured (or otherwise followed up) one change, oldest first."""
        with self.db.transaction(write=False) as s:
            stmt = select(ImprovementAuditLog).where(ImprovementAuditLog.refers_to == log_id)
            return list(s.scalars(stmt.order_by(ImprovementAuditLog.created_at)))

    def listed(
        self,
        *,
        action_types: Sequence[str] | None = None,
        before: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[ImprovementAuditLog], int]:
        """A page of the log, newest first, and how many entries match in all (for paging)."""
        where: list[ColumnElement[bool]] = []
        if action_types:
            where.append(ImprovementAuditLog.action_type.in_(list(action_types)))
        if before is not None:
            where.append(ImprovementAuditLog.created_at < before)
        stmt = select(ImprovementAuditLog).where(*where)
        stmt = stmt.order_by(ImprovementAuditLog.created_at.desc(), ImprovementAuditLog.log_id)
        with self.db.transaction(write=False) as s:
            total = int(s.scalar(select(func.count()).select_from(ImprovementAuditLog).where(*where)) or 0)
            return list(s.scalars(stmt.limit(limit).offset(offset))), total

    def counts(self) -> dict[str, int]:
        """Entries per action type (the filter's choices)."""
        stmt = select(ImprovementAuditLog.action_type, func.count()).group_by(ImprovementAuditLog.action_type)
        with self.db.transaction(write=False) as s:
            return {str(t): int(n) for t, n in s.execute(stmt)}
