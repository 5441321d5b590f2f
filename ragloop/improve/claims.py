"""The two conditional claims the scheduler and auditor need beyond `store.improvement_actions`:

- `claim_action`: proposed (or scheduled with an expired lease) -> scheduled for one named action,
  only while its component has no other action in flight *or applied and not yet audited* (the
  seed's "the second waits for the first to complete and its quality impact to be measured").
  `ImprovementActions.claim_next` takes the best due action but counts only scheduled ones as
  busy, and cannot be asked for a particular row.
- `claim_audit`: moves an applied action's `audit_due_at` forward by a lease, conditional on the
  value read, so two auditors never measure (and revert) one action twice.

Both are one conditional UPDATE (rowcount 1 = ours) under the repository's claim lock, so they
serialise with `claim_next`. They belong in the repository; they live here until it has them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Table, and_, exists, or_, update
from sqlalchemy.orm import aliased

from ragloop.store import ImprovementAction, Store
from ragloop.store.repositories._base import _serialize

ACTIONS = cast(Table, ImprovementAction.__table__)
A = ACTIONS.c
CLAIM_LOCK = "improvement_actions:claim"


def claim_action(store: Store, action_id: str, claimer: str, now: datetime, lease_s: float) -> bool:
    other = aliased(ImprovementAction)
    busy = exists().where(
        other.component == A.component,
        other.action_id != A.action_id,
        or_(
            and_(other.status == "scheduled", other.lease_expires_at > now),
            and_(other.status == "applied", other.audit_due_at.is_not(None), other.audited_at.is_(None)),
        ),
    )
    due = or_(A.status == "proposed", and_(A.status == "scheduled", A.lease_expires_at <= now))
    with store.db.transaction() as s:
        _serialize(s, CLAIM_LOCK)
        result = s.execute(
            update(ACTIONS)
            .where(A.action_id == action_id, due, ~busy)
            .values(
                status="scheduled",
                claimed_by=claimer,
                lease_expires_at=now + timedelta(seconds=lease_s),
                attempts=A.attempts + 1,
                updated_at=now,
            )
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def claim_audit(store: Store, action_id: str, seen_due: datetime, now: datetime, lease_s: float) -> bool:
    with store.db.transaction() as s:
        _serialize(s, CLAIM_LOCK)
        result = s.execute(
            update(ACTIONS)
            .where(A.action_id == action_id, A.status == "applied", A.audit_due_at == seen_due, A.audited_at.is_(None))
            .values(audit_due_at=now + timedelta(seconds=lease_s), updated_at=now)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]
