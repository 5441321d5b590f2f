"""The two conditional claims the scheduler and auditor need beyond `store.improvement_actions`:

- `claim_action`: proposed (or scheduled with an expired lease) -> scheduled for one named action,
  only while no action with its conflict key is in flight *or applied and not yet audited* (the
  seed's "the second waits for the first to complete and its quality impact to be measured"). The
  key is the component, narrowed by the remediation kind where its actions touch disjoint parts
  (expansion entries of different query groups share `expansion_cache:<collection>`).
  `ImprovementActions.claim_next` takes the best due action but counts only scheduled ones as
  busy, and cannot be asked for a particular row.
- `extend_action`: pushes a scheduled action's lease forward while its claimer still holds it, so an
  apply that outlasts one lease (a collection-wide chunking fit) is not redone by another scheduler.
- `claim_audit`: moves an applied action's `audit_due_at` forward by a lease, conditional on the
  value read, so two auditors never measure (and revert) one action twice.

Each is one conditional UPDATE (rowcount 1 = ours); the two claims take the repository's claim lock,
so they serialise with `claim_next`. They belong in the repository; they live here until it has them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import cast

from sqlalchemy import Table, and_, or_, select, update

from ragloop.config.clock import CONFIGURED_CLOCK, on_clock
from ragloop.store import ImprovementAction, Store
from ragloop.store.repositories._base import _serialize

ACTIONS = cast(Table, ImprovementAction.__table__)
A = ACTIONS.c
CLAIM_LOCK = "improvement_actions:claim"


ConflictKey = Callable[[str, str, str], str]
"""(kind, component, dedupe_key) -> the key two conflicting actions share."""


def claim_action(
    store: Store, action_id: str, claimer: str, now: datetime, lease_s: float, conflict_key: ConflictKey
) -> bool:
    in_flight = or_(
        and_(A.status == "scheduled", A.lease_expires_at > now),
        and_(A.status == "applied", A.audit_due_at.is_not(None), A.audited_at.is_(None)),
    )
    due = or_(A.status == "proposed", and_(A.status == "scheduled", A.lease_expires_at <= now))
    with store.db.transaction() as s:
        _serialize(s, CLAIM_LOCK)
        mine = s.execute(select(A.kind, A.component, A.dedupe_key).where(A.action_id == action_id)).first()
        if mine is None:
            return False
        key = conflict_key(mine.kind, mine.component, mine.dedupe_key)
        others = s.execute(
            select(A.kind, A.component, A.dedupe_key).where(
                A.action_id != action_id, A.component == mine.component, in_flight
            )
        ).all()
        if any(conflict_key(o.kind, o.component, o.dedupe_key) == key for o in others):
            return False
        result = s.execute(
            update(ACTIONS)
            .where(A.action_id == action_id, due)
            .values(
                status="scheduled",
                claimed_by=claimer,
                lease_expires_at=now + on_clock(CONFIGURED_CLOCK, lease_s),
                attempts=A.attempts + 1,
                updated_at=now,
            )
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def extend_action(store: Store, action_id: str, claimer: str, now: datetime, lease_s: float) -> bool:
    with store.db.transaction() as s:
        result = s.execute(
            update(ACTIONS)
            .where(A.action_id == action_id, A.status == "scheduled", A.claimed_by == claimer)
            .values(lease_expires_at=now + on_clock(CONFIGURED_CLOCK, lease_s))
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def claim_audit(store: Store, action_id: str, seen_due: datetime, now: datetime, lease_s: float) -> bool:
    with store.db.transaction() as s:
        _serialize(s, CLAIM_LOCK)
        result = s.execute(
            update(ACTIONS)
            .where(A.action_id == action_id, A.status == "applied", A.audit_due_at == seen_due, A.audited_at.is_(None))
            .values(audit_due_at=now + on_clock(CONFIGURED_CLOCK, lease_s), updated_at=now)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]
