"""Pipeline versions: register, activate, roll back. Its own module because exactly one version may be
active, and switching it must be serialised and audited atomically."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from ragloop.config.pipeline import PipelineConfig
from ragloop.store.db import Database
from ragloop.store.models import PipelineVersion, utcnow
from ragloop.store.repositories._base import StoreConflictError, _require, _serialize
from ragloop.store.repositories.audit import AuditLog


class PipelineVersions:
    """Stored pipeline configurations; exactly one is active. `activate` and `rollback` are audited."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.audit = AuditLog(db)

    def register(
        self,
        version_id: str,
        config: Mapping[str, Any],
        *,
        description: str | None = None,
        parent_version_id: str | None = None,
        created_by: str | None = None,
    ) -> PipelineVersion:
        """Store a configuration as a candidate; registering the same version again returns the stored
        row (versions are immutable: its parent and creator stay the first registration's). The id is
        a hash of the config, so the same id with a different config is an error. Serialised with the
        other version writers: servers started together register the same start-up config at once, and
        without the lock all but one failed on the primary key (and did not start)."""
        with self.db.transaction() as s:
            _serialize(s, "pipeline_versions")
            row = s.get(PipelineVersion, version_id)
            if row is not None:
                if row.config != dict(config):
                    raise StoreConflictError(f"pipeline version {version_id} is stored with a different config")
                return row
            row = PipelineVersion(
                version_id=version_id,
                config=dict(config),
                description=description,
                parent_version_id=parent_version_id if parent_version_id != version_id else None,
                created_by=created_by,
            )
            s.add(row)
            s.flush()
            return row

    def register_config(
        self,
        config: PipelineConfig,
        *,
        description: str | None = None,
        parent_version_id: str | None = None,
        created_by: str | None = None,
    ) -> PipelineVersion:
        data = config.model_dump(mode="json", by_alias=True)
        return self.register(
            config.version_id,
            data,
            description=description or config.name,
            parent_version_id=parent_version_id,
            created_by=created_by,
        )

    def approve(self, version_id: str, *, actor: str, note: str = "") -> PipelineVersion:
        """Record a human approval checkpoint on a version (audited)."""
        with self.db.transaction() as s:
            row = _require(s, PipelineVersion, version_id)
            row.approvals = [*row.approvals, {"actor": actor, "at": utcnow().isoformat(), "note": note}]
            s.flush()
            self.audit.record(
                "pipeline_approve",
                triggered_by=note or "manual",
                actor=actor,
                evidence={"version": version_id},
                pipeline_version_after=version_id,
            )
            return row

    def get(self, version_id: str) -> PipelineVersion | None:
        with self.db.transaction(write=False) as s:
            return s.get(PipelineVersion, version_id)

    def current(self) -> PipelineVersion | None:
        """The active version (None before the first activation)."""
        with self.db.transaction(write=False) as s:
            return s.scalar(select(PipelineVersion).where(PipelineVersion.status == "active"))

    def list_versions(self, *, status: str | None = None) -> list[PipelineVersion]:
        stmt = select(PipelineVersion)
        if status is not None:
            stmt = stmt.where(PipelineVersion.status == status)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(PipelineVersion.created_at, PipelineVersion.version_id)))

    def activate(
        self,
        version_id: str,
        *,
        actor: str = "system",
        reason: str = "manual",
        evidence: Mapping[str, Any] | None = None,
        quality: Mapping[str, float] | None = None,
        via: str = "admin",
        expected_current: str | None = None,
        expected_delta: Mapping[str, Any] | None = None,
    ) -> PipelineVersion:
        """Make `version_id` the one active version (the previous one is retired and remembered for
        `rollback`), and audit it. Activating the active version changes nothing. With
        `expected_current`, the switch only happens when that version is still the active one
        (StoreConflictError otherwise): a promotion decided on evidence about one control never
        replaces another. `expected_delta`: the measured difference the switch was made on, which
        `ragloop.experiments.activation_audit` later sets the actual one beside."""
        with self.db.transaction() as s:
            _serialize(s, "pipeline_versions")
            target = _require(s, PipelineVersion, version_id)
            current = s.scalar(select(PipelineVersion).where(PipelineVersion.status == "active"))
            if current is not None and current.version_id == version_id:
                return target
            if expected_current is not None and (current is None or current.version_id != expected_current):
                found = current.version_id if current is not None else None
                raise StoreConflictError(f"the active version is {found}, not {expected_current}")
            now = utcnow()
            if current is not None:
                current.status, current.retired_at = "retired", now
                s.flush()  # the one-active index must never see two
            target.status, target.activated_at, target.retired_at = "active", now, None
            target.previous_version_id = current.version_id if current is not None else None
            target.promoted_by = actor
            target.promoted_via = via
            target.quality_at_promotion = dict(quality or {})
            s.flush()
            self.audit.record(
                "pipeline_activate",
                triggered_by=reason,
                actor=actor,
                evidence=dict(evidence or {}),
                pipeline_version_before=current.version_id if current is not None else None,
                pipeline_version_after=version_id,
                expected_delta=expected_delta,
            )
            return target

    def rollback(
        self,
        *,
        target_version: str | None = None,
        actor: str = "system",
        reason: str = "manual",
        evidence: Mapping[str, Any] | None = None,
        via: str = "admin",
    ) -> PipelineVersion:
        """Reactivate the version that was active before the current one (or `target_version`), retire
        the current one, audit it, and return the now-active version. Rolling back again steps further
        back (each version remembers what it replaced). Raises StoreConflictError when there is nothing
        to roll back to."""
        with self.db.transaction() as s:
            _serialize(s, "pipeline_versions")
            current = s.scalar(select(PipelineVersion).where(PipelineVersion.status == "active"))
            if current is None:
                raise StoreConflictError("no active pipeline version to roll back from")
            goal = target_version or current.previous_version_id
            if goal is None:
                raise StoreConflictError(f"pipeline version {current.version_id} has no previous version")
            if goal == current.version_id:
                raise StoreConflictError(f"pipeline version {goal} is already active")
            target = _require(s, PipelineVersion, goal)
            now = utcnow()
            current.status, current.retired_at = "retired", now
            s.flush()
            target.status, target.activated_at, target.retired_at = "active", now, None
            target.promoted_by = actor
            target.promoted_via = via
            s.flush()
            self.audit.record(
                "pipeline_rollback",
                triggered_by=reason,
                actor=actor,
                evidence=dict(evidence or {}),
                pipeline_version_before=current.version_id,
                pipeline_version_after=target.version_id,
            )
            return target
