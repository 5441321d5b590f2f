"""Improvement actions: the remediation queue the scheduler, the remediations and the auditor share.

Life of an action::

    propose ──► proposed ──claim──► scheduled ──applied──► applied ──kept──► kept
                  │  ▲                 │ failed (retry): back to proposed        │
                  │  └─────────────────┤                                          └─reverted─► reverted
                  │                    │ failed (final) ──► failed          (applied or kept ──► reverted)
                  └─reject──► rejected

- `propose` is idempotent on (kind, component, dedupe_key), the table's unique key: proposing what
  exists adds the new answers to its evidence (and raises its priority) while it is still proposed,
  and otherwise changes nothing. Together with the claim this is what makes "apply once" hold
  across any number of workers.
- `claim_next` takes the highest-priority proposed action (or a scheduled one whose lease expired:
  its scheduler died) whose component has no other action in flight, and marks it scheduled with a
  lease. The row is picked with `FOR UPDATE SKIP LOCKED` on PostgreSQL, like `store/queue.py`, and
  claims are serialised by an advisory lock so two claimers cannot take two actions on one
  component at once (the "conflicting remediations serialised" rule); on SQLite the write lock
  (BEGIN IMMEDIATE) serialises them.
- Every transition checks the state it starts from (`StoreConflictError` otherwise), under a row
  lock, so a second `mark_applied` of one action fails instead of recording two applications.

Times come from the injectable `clock` (the loop's one clock).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, and_, exists, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased
from sqlalchemy.sql.elements import ColumnElement

from ragloop.store.db import Database
from ragloop.store.improve_models import ACTION_STATUSES, ImprovementAction
from ragloop.store.models import new_id, utcnow
from ragloop.store.repositories._base import NotFoundError, StoreConflictError, _serialize
from ragloop.store.vocabulary import ActionStatus

ACTIONS = cast(Table, ImprovementAction.__table__)
A = ACTIONS.c
MAX_ERROR_CHARS = 4000
MAX_ANSWER_IDS = 200


@dataclass(frozen=True)
class Proposal:
    """What `propose` did: the action as stored now, and whether this call created it."""

    action: ImprovementAction
    created: bool


class ImprovementActions:
    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    # ---------------------------------------------------------------- proposing

    def propose(
        self,
        kind: str,
        component: str,
        dedupe_key: str,
        *,
        domain: str | None = None,
        answer_ids: Sequence[str] = (),
        evidence: Mapping[str, Any] | None = None,
        expected_delta: Mapping[str, Any] | None = None,
        payload: Mapping[str, Any] | None = None,
        priority: float = 0.0,
    ) -> Proposal:
        """Insert a proposed action unless (kind, component, dedupe_key) exists. An existing action that
        is still `proposed` gains the new `answer_ids` and the higher priority; any other is returned
        unchanged (applied once means proposed again changes nothing)."""
        if not kind or not component or not dedupe_key:
            raise ValueError("kind, component and dedupe_key must be non-empty")
        now = self.clock()
        with self.db.transaction() as s:
            insert = postgresql.insert if self.db.dialect == "postgresql" else sqlite.insert
            stmt = (
                insert(ACTIONS)
                .values(
                    action_id=new_id(),
                    kind=kind,
                    status=ActionStatus.PROPOSED,
                    component=component,
                    dedupe_key=dedupe_key,
                    domain=domain,
                    answer_ids=list(dict.fromkeys(answer_ids))[:MAX_ANSWER_IDS],
                    evidence=dict(evidence or {}),
                    expected_delta=dict(expected_delta) if expected_delta is not None else None,
                    payload=dict(payload or {}),
                    priority=float(priority),
                    attempts=0,
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict_do_nothing(index_elements=["kind", "component", "dedupe_key"])
                .returning(A.action_id)
            )
            created = s.execute(stmt).scalar() is not None
            row = s.scalar(
                select(ImprovementAction)
                .where(
                    ImprovementAction.kind == kind,
                    ImprovementAction.component == component,
                    ImprovementAction.dedupe_key == dedupe_key,
                )
                .with_for_update()
            )
            assert row is not None
            if not created and row.status == ActionStatus.PROPOSED:
                merged = list(dict.fromkeys([*row.answer_ids, *answer_ids]))[:MAX_ANSWER_IDS]
                if merged != row.answer_ids or priority > row.priority:
                    row.answer_ids = merged
                    row.priority = max(row.priority, float(priority))
                    row.updated_at = now
            s.flush()
            return Proposal(row, created)

    # ---------------------------------------------------------------- scheduling

    def claim_next(
        self,
        claimer: str,
        *,
        lease_seconds: float = 600.0,
        kinds: Sequence[str] | None = None,
        domain: str | None = None,
        exclude_domains: Sequence[str] = (),
    ) -> ImprovementAction | None:
        """Schedule the highest-priority due action for `claimer`: proposed, or scheduled with an expired
        lease; never one whose component has another action scheduled under a live lease. None when
        nothing is due. Each claim counts as an attempt."""
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        now = self.clock()
        with self.db.transaction() as s:
            _serialize(s, "improvement_actions:claim")
            due = self._due(now)
            other = aliased(ImprovementAction)
            busy = exists().where(
                other.component == A.component,
                other.action_id != A.action_id,
                other.status == ActionStatus.SCHEDULED,
                other.lease_expires_at > now,
            )
            conds: list[ColumnElement[bool]] = [due, ~busy]
            conds += [A.kind.in_(list(kinds))] if kinds is not None else []
            conds += [A.domain == domain] if domain is not None else []
            conds += [or_(A.domain.is_(None), A.domain.not_in(list(exclude_domains)))] if exclude_domains else []
            pick = select(A.action_id).where(*conds).order_by(A.priority.desc(), A.created_at, A.action_id).limit(1)
            if self.db.dialect == "postgresql":
                pick = pick.with_for_update(skip_locked=True)
            action_id = s.execute(pick).scalar()
            if action_id is None:
                return None
            s.execute(
                update(ACTIONS)
                .where(A.action_id == action_id, due)
                .values(
                    status=ActionStatus.SCHEDULED,
                    claimed_by=claimer,
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                    attempts=A.attempts + 1,
                    updated_at=now,
                )
            )
            row = s.get(ImprovementAction, action_id, populate_existing=True)
            return (
                row if row is not None and row.status == ActionStatus.SCHEDULED and row.claimed_by == claimer else None
            )

    @staticmethod
    def _due(now: datetime) -> ColumnElement[bool]:
        return or_(
            A.status == ActionStatus.PROPOSED, and_(A.status == ActionStatus.SCHEDULED, A.lease_expires_at <= now)
        )

    # ---------------------------------------------------------------- transitions

    def _transition(
        self, s: Session, action_id: str, allowed: Sequence[str], to: str, claimer: str | None = None
    ) -> ImprovementAction:
        row = s.scalar(select(ImprovementAction).where(ImprovementAction.action_id == action_id).with_for_update())
        if row is None:
            raise NotFoundError(f"no improvement action {action_id!r}")
        if row.status not in allowed:
            raise StoreConflictError(f"action {action_id} is {row.status}; it cannot become {to}")
        if claimer is not None and row.status == ActionStatus.SCHEDULED and row.claimed_by != claimer:
            raise StoreConflictError(f"action {action_id} is scheduled by {row.claimed_by}, not {claimer}")
        row.status, row.updated_at = to, self.clock()
        return row

    def mark_applied(
        self,
        action_id: str,
        *,
        claimer: str | None = None,
        revert_payload: Mapping[str, Any] | None = None,
        audit_after_s: float | None = None,
        expected_delta: Mapping[str, Any] | None = None,
    ) -> ImprovementAction:
        """scheduled → applied; `audit_after_s` sets when the auditor measures it."""
        with self.db.transaction() as s:
            row = self._transition(s, action_id, (ActionStatus.SCHEDULED,), ActionStatus.APPLIED, claimer)
            now = row.updated_at
            row.applied_at, row.lease_expires_at, row.error = now, None, None
            if revert_payload is not None:
                row.revert_payload = dict(revert_payload)
            if expected_delta is not None:
                row.expected_delta = dict(expected_delta)
            if audit_after_s is not None:
                row.audit_due_at = now + timedelta(seconds=audit_after_s)
            s.flush()
            return row

    def mark_failed(
        self, action_id: str, error: str, *, claimer: str | None = None, retry: bool = False
    ) -> ImprovementAction:
        """scheduled → failed, or with `retry` back to proposed (the error kept for the next attempt)."""
        with self.db.transaction() as s:
            row = self._transition(
                s,
                action_id,
                (ActionStatus.SCHEDULED,),
                ActionStatus.PROPOSED if retry else ActionStatus.FAILED,
                claimer,
            )
            row.error, row.lease_expires_at = error[:MAX_ERROR_CHARS], None
            if retry:
                row.claimed_by = None
            s.flush()
            return row

    def release(self, action_id: str, reason: str, *, claimer: str | None = None) -> ImprovementAction:
        """scheduled → proposed without counting the attempt: the work was sound but is moot (the
        version it was fitted on stopped serving while it ran), so the next pass redoes it on the new one."""
        with self.db.transaction() as s:
            row = self._transition(s, action_id, (ActionStatus.SCHEDULED,), ActionStatus.PROPOSED, claimer)
            row.error, row.lease_expires_at, row.claimed_by = reason[:MAX_ERROR_CHARS], None, None
            row.attempts = max(0, row.attempts - 1)
            s.flush()
            return row

    def mark_kept(self, action_id: str, *, actual_delta: Mapping[str, Any] | None = None) -> ImprovementAction:
        """applied → kept: the auditor measured it and it stays."""
        with self.db.transaction() as s:
            row = self._transition(s, action_id, (ActionStatus.APPLIED,), ActionStatus.KEPT)
            row.audited_at, row.actual_delta = row.updated_at, dict(actual_delta or {})
            s.flush()
            return row

    def mark_reverted(
        self, action_id: str, *, actual_delta: Mapping[str, Any] | None = None, reason: str | None = None
    ) -> ImprovementAction:
        """applied or kept → reverted (by the auditor, or an admin)."""
        with self.db.transaction() as s:
            row = self._transition(s, action_id, (ActionStatus.APPLIED, ActionStatus.KEPT), ActionStatus.REVERTED)
            row.reverted_at = row.updated_at
            if actual_delta is not None:
                row.actual_delta, row.audited_at = dict(actual_delta), row.updated_at
            if reason:
                row.error = reason[:MAX_ERROR_CHARS]
            s.flush()
            return row

    def reject(self, action_id: str, reason: str) -> ImprovementAction:
        """proposed (or scheduled) → rejected: the scheduler's rules or an admin said no."""
        with self.db.transaction() as s:
            row = self._transition(s, action_id, (ActionStatus.PROPOSED, ActionStatus.SCHEDULED), ActionStatus.REJECTED)
            row.error, row.lease_expires_at = reason[:MAX_ERROR_CHARS], None
            s.flush()
            return row

    def update_payload(
        self, action_id: str, *, payload: Mapping[str, Any] | None = None, evidence: Mapping[str, Any] | None = None
    ) -> ImprovementAction:
        """Merge keys into `payload` / `evidence` (e.g. what apply learned) without changing the status."""
        with self.db.transaction() as s:
            row = s.scalar(select(ImprovementAction).where(ImprovementAction.action_id == action_id).with_for_update())
            if row is None:
                raise NotFoundError(f"no improvement action {action_id!r}")
            if payload:
                row.payload = {**row.payload, **payload}
            if evidence:
                row.evidence = {**row.evidence, **evidence}
            row.updated_at = self.clock()
            s.flush()
            return row

    # ---------------------------------------------------------------- reading

    def get(self, action_id: str) -> ImprovementAction | None:
        with self.db.transaction(write=False) as s:
            return s.get(ImprovementAction, action_id)

    def find(self, kind: str, component: str, dedupe_key: str) -> ImprovementAction | None:
        with self.db.transaction(write=False) as s:
            return s.scalar(
                select(ImprovementAction).where(
                    ImprovementAction.kind == kind,
                    ImprovementAction.component == component,
                    ImprovementAction.dedupe_key == dedupe_key,
                )
            )

    def listed(
        self,
        *,
        status: str | Sequence[str] | None = None,
        kind: str | None = None,
        domain: str | None = None,
        component: str | None = None,
        answer_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[ImprovementAction]:
        """Newest first. `answer_id` filters in Python (JSON containment differs by backend), after the
        other filters."""
        stmt = select(ImprovementAction)
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            unknown = set(statuses) - set(ACTION_STATUSES)
            if unknown:
                raise ValueError(f"unknown action status {sorted(unknown)}; expected {ACTION_STATUSES}")
            stmt = stmt.where(ImprovementAction.status.in_(statuses))
        if kind is not None:
            stmt = stmt.where(ImprovementAction.kind == kind)
        if domain is not None:
            stmt = stmt.where(ImprovementAction.domain == domain)
        if component is not None:
            stmt = stmt.where(ImprovementAction.component == component)
        stmt = stmt.order_by(ImprovementAction.created_at.desc(), ImprovementAction.action_id)
        with self.db.transaction(write=False) as s:
            if answer_id is None:
                return list(s.scalars(stmt.limit(limit).offset(offset)))
            rows = [r for r in s.scalars(stmt) if answer_id in (r.answer_ids or [])]
            return rows[offset : offset + limit]

    def due_for_audit(self, *, limit: int = 100) -> list[ImprovementAction]:
        """Applied actions whose audit time has come, oldest due first."""
        now = self.clock()
        stmt = (
            select(ImprovementAction)
            .where(ImprovementAction.status == ActionStatus.APPLIED, ImprovementAction.audit_due_at <= now)
            .order_by(ImprovementAction.audit_due_at, ImprovementAction.action_id)
            .limit(limit)
        )
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt))

    def applied_since(self, since: datetime, *, domain: str | None = None, kind: str | None = None) -> int:
        """Actions applied at or after `since` (whatever became of them since): the daily cap's count."""
        conds: list[ColumnElement[bool]] = [A.applied_at.is_not(None), A.applied_at >= since]
        conds += [A.domain == domain] if domain is not None else []
        conds += [A.kind == kind] if kind is not None else []
        with self.db.transaction(write=False) as s:
            return int(s.scalar(select(func.count()).select_from(ACTIONS).where(*conds)) or 0)

    def counts(self) -> dict[str, int]:
        """Actions by status (every status present, zeros included)."""
        with self.db.transaction(write=False) as s:
            rows = s.execute(select(A.status, func.count()).group_by(A.status)).all()
        out: dict[str, int] = {str(s): 0 for s in ACTION_STATUSES}
        out.update({status: int(n) for status, n in rows})
        return out
