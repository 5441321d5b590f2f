"""The remediation auditor: once a DIRECT action's window has passed on the clock (24 h by default),
measure its query group again through the retriever that serves now and decide on the interval.

- after - before is the paired bootstrap 95% interval over the group's questions (the failed
  question(s) and their paraphrases, frozen at apply time), of the share of the group's targets
  found in the top k;
- revert when the interval's upper bound is below 0 (it made things worse) or below `shortfall`
  x the expected delta (it did far less than the diagnosis promised: an unchanged group reverts);
- keep otherwise, and also when fewer than `min_questions` were measured (no interval to act on);
- on a revert, raise that kind's evidence threshold by `threshold_step` (adaptive conservatism):
  the scheduler then rejects proposals of that kind with less confident diagnoses.
Every verdict is an audit entry whose `refers_to` is the action's apply entry, carrying the actual
delta; a raised threshold is its own entry referring to the revert. Two auditors never take one
action: each claims it by moving its due time forward (`claims.claim_audit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ragloop.improve.claims import claim_audit
from ragloop.improve.remediation import ActionSpec, AppliedChange, RemediationContext, make_remediation
from ragloop.improve.remediation.measure import Delta, delta, measure
from ragloop.improve.scheduler import THRESHOLD_ACTION, Policy, evidence_thresholds
from ragloop.store import ImprovementAction, ImprovementActions


class Verdict(StrEnum):
    KEPT = "kept"
    REVERTED = "reverted"
    INCONCLUSIVE = "inconclusive"
    """Kept: too few questions for an interval."""
    REVERT_FAILED = "revert_failed"
    """The revert raised: the action stays applied and is audited again after the lease."""
    SKIPPED = "skipped"
    """Another auditor holds it."""


@dataclass(frozen=True)
class AuditResult:
    action_id: str
    kind: str
    verdict: Verdict
    delta: Delta | None = None
    expected: float | None = None
    threshold_before: float | None = None
    threshold_after: float | None = None
    log_id: str | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "action_id": self.action_id,
            "kind": self.kind,
            "verdict": self.verdict.value,
            "delta": self.delta.to_json() if self.delta else None,
            "expected": self.expected,
            "threshold_before": self.threshold_before,
            "threshold_after": self.threshold_after,
            "log_id": self.log_id,
            "detail": self.detail,
        }


def decide(d: Delta, expected: float, policy: Policy) -> Verdict:
    if d.n < policy.min_questions or math.isnan(d.hi):
        return Verdict.INCONCLUSIVE
    if d.hi < 0.0 or d.hi < policy.shortfall * expected:
        return Verdict.REVERTED
    return Verdict.KEPT


@dataclass
class Auditor:
    ctx: RemediationContext
    policy: Policy = field(default_factory=Policy)
    worker: str = "auditor"

    def __post_init__(self) -> None:
        self.actions = ImprovementActions(self.ctx.store.db, clock=self.ctx.clock)

    def run(self) -> list[AuditResult]:
        return [self.audit(row) for row in self.actions.due_for_audit(limit=1000)]

    def audit(self, row: ImprovementAction) -> AuditResult:
        ctx, now = self.ctx, self.ctx.clock.now()
        spec = ActionSpec.from_row(row)
        assert row.audit_due_at is not None
        if not claim_audit(ctx.store, row.action_id, row.audit_due_at, now, self.policy.lease_s):
            return AuditResult(row.action_id, row.kind, Verdict.SKIPPED, detail="held by another auditor")
        change = AppliedChange.model_validate(row.revert_payload or {})
        expected = float((spec.expected_delta or {}).get("value", 0.0))
        applied_log = spec.payload.get("applied_log_id")
        if change.group is None or change.baseline is None:
            d = Delta(math.nan, math.nan, math.nan, math.nan, math.nan, 0)
        else:
            after = measure(ctx, change.group)
            d = delta(change.baseline.scores, after.scores, resamples=ctx.settings.resamples, seed=ctx.settings.seed)
        verdict = decide(d, expected, self.policy)
        actual = {**d.to_json(), "expected": expected, "verdict": verdict.value}
        if verdict is not Verdict.REVERTED:
            with ctx.store.db.transaction():
                self.actions.mark_kept(row.action_id, actual_delta=actual)
                entry = ctx.store.audit.record(
                    "remediation_keep",
                    triggered_by=f"audit:{row.action_id}",
                    actor=self.worker,
                    evidence={
                        "action_id": row.action_id,
                        "kind": row.kind,
                        "domain": row.domain,
                        "verdict": verdict.value,
                    },
                    expected_delta=spec.expected_delta,
                    actual_delta=actual,
                    refers_to=applied_log,
                )
            return AuditResult(row.action_id, row.kind, verdict, d, expected, log_id=entry.log_id)
        try:
            make_remediation(spec).revert(ctx, change)
        except Exception as exc:  # stays applied; due again once the claim's lease passes
            self.actions.update_payload(row.action_id, evidence={"revert_error": f"{type(exc).__name__}: {exc}"})
            return AuditResult(row.action_id, row.kind, Verdict.REVERT_FAILED, d, expected, detail=str(exc))
        before_t = evidence_thresholds(ctx, self.policy)[spec.kind]
        after_t = min(self.policy.max_threshold, round(before_t + self.policy.threshold_step, 6))
        reason = (
            f"interval [{d.lo:.3f}, {d.hi:.3f}] of the group's target recall@k change is below "
            f"{self.policy.shortfall} x expected {expected:.3f}"
            if d.hi >= 0
            else f"interval [{d.lo:.3f}, {d.hi:.3f}] is below 0"
        )
        with ctx.store.db.transaction():
            self.actions.mark_reverted(row.action_id, actual_delta=actual, reason=reason)
            entry = ctx.store.audit.record(
                "remediation_revert",
                triggered_by=f"audit:{row.action_id}",
                actor=self.worker,
                evidence={
                    "action_id": row.action_id,
                    "kind": row.kind,
                    "domain": row.domain,
                    "reason": reason,
                    "undone": change.revert,
                },
                expected_delta=spec.expected_delta,
                actual_delta=actual,
                refers_to=applied_log,
            )
            ctx.store.audit.record(
                THRESHOLD_ACTION,
                triggered_by=f"audit:{row.action_id}",
                actor=self.worker,
                evidence={"kind": row.kind, "before": before_t, "after": after_t, "because": row.action_id},
                refers_to=entry.log_id,
            )
        return AuditResult(
            row.action_id, row.kind, Verdict.REVERTED, d, expected, before_t, after_t, entry.log_id, reason
        )
