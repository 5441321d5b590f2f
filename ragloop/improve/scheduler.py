"""The remediation scheduler: which proposed actions to apply now, and applying each exactly once.

Rules, in the order they are checked for each due action (proposed, or scheduled by a scheduler
whose lease ran out):
1. Order: user-reported first, then priority = impact (answers in the action's group: similar
   queries that would benefit) x confidence / cost, then age.
2. Readiness: an action that needs more data (a ranking buffer below its size, a threshold refit
   without enough labelled samples) stays proposed.
3. Evidence threshold: an action whose diagnosis confidence is below its kind's threshold is
   rejected. Thresholds start at `base_threshold` and rise each time the auditor reverts that kind
   (adaptive conservatism); they are audit-log entries (`evidence_threshold`), read back here.
4. Daily cap: at most `daily_cap` DIRECT remediations applied per domain (collection) per day of
   the clock; the rest stay proposed for the next day. Candidates and records are not capped:
   they change nothing that serves.
5. Conflicts: one action per conflict key (the component; an expansion entry narrows it to its query
   group) in flight or applied-and-unaudited; the next waits until the first is audited.
6. Exactly once: the claim is a conditional UPDATE (`claims.claim_action`); the action becomes
   `applied` and its audit entry (evidence, expected delta, the change) is written in one
   transaction, so a change is never recorded twice and never recorded without its entry.
7. Monitor mode: while tier 1's weekly agreement is below 0.75 (`recalibration.state`), every
   action but tier 1's own recalibration stays proposed (`deferred_monitor`): tier 1 chooses what
   gets diagnosed, so its proposals wait until it is trusted again.
8. One version a pass: the pass weighs and applies actions against the pipeline that served when it
   started; once another version is activated the pass stops and the rest stay proposed for the
   next pass (a fit on the old version's pool would spend that version's error budget and re-propose
   what already serves). A version activated *during* an apply supersedes it: a CANDIDATE apply stops
   before registering its candidate, a DIRECT one is undone, and either is released unapplied
   (`superseded`, the attempt not counted, audited as `remediation_superseded`), its notes unwritten,
   for the next pass to redo on the new version.
A DIRECT action's query group is measured just before apply: the auditor's "before". A kind that
can preview its change (a re-chunk: the index it would write, built in memory) is measured again on
that preview; when the paired interval of preview - before holds no gain (its upper end <= 0) the
action is rejected before anything serving changes, otherwise the preview's delta is the expected
one the auditor holds the change to. Without a preview, the expected delta is the proposal's own or
`EXPECTED_SHARE` x confidence x the group's headroom (1 - its baseline), the improvement the
diagnosis promises.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragloop.improve.claims import claim_action, extend_action
from ragloop.improve.clock import day_start
from ragloop.improve.recalibration import state as tier1_state
from ragloop.improve.remediation import (
    REMEDIATIONS,
    ActionSpec,
    AppliedChange,
    Effect,
    GroupMeasurement,
    QueryGroup,
    Remediation,
    RemediationContext,
    SupersededError,
    check_serving,
    make_remediation,
)
from ragloop.improve.remediation.measure import Delta, delta, measure
from ragloop.improve.remediation.ranking import audit_action_type
from ragloop.improve.types import ActionKind
from ragloop.store import ImprovementActions, StoreConflictError

THRESHOLD_ACTION = "evidence_threshold"
SUPERSEDED_ACTION = "remediation_superseded"
USER_REPORTED_BOOST = 2.0
EXPECTED_SHARE = 0.5


class Policy(BaseModel):
    """The scheduler's and auditor's knobs (the seed's numbers by default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    daily_cap: int = Field(default=5, ge=0)
    audit_window_s: float = Field(default=86_400.0, gt=0)
    lease_s: float = Field(default=600.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    max_per_pass: int = Field(default=20, ge=1)
    base_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    threshold_step: float = Field(default=0.1, gt=0.0)
    max_threshold: float = Field(default=0.95, le=1.0)
    shortfall: float = Field(default=0.5, ge=0.0, le=1.0)
    """Revert when the interval's upper bound is below this share of the expected delta."""
    min_questions: int = Field(default=3, ge=2)
    """Fewer measured questions than this: the interval says nothing; the action is kept."""


class Outcome(StrEnum):
    APPLIED = "applied"
    REJECTED = "rejected"
    NOT_READY = "not_ready"
    DEFERRED_CAP = "deferred_cap"
    DEFERRED_CONFLICT = "deferred_conflict"
    CLAIMED_ELSEWHERE = "claimed_elsewhere"
    FAILED = "failed"
    RETRY = "retry"
    UNSUPPORTED = "unsupported"
    DEFERRED_MONITOR = "deferred_monitor"
    """Tier 1 is in monitor mode: no automated remediation but its own recalibration."""
    SUPERSEDED = "superseded"
    """Another version was activated while it was applied: undone, proposed again for the next pass."""


@dataclass(frozen=True)
class ScheduleResult:
    action_id: str
    kind: str
    domain: str | None
    outcome: Outcome
    detail: str = ""
    audit_log_id: str | None = None
    candidate_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: (v.value if isinstance(v, StrEnum) else v) for k, v in self.__dict__.items()}


def evidence_thresholds(ctx: RemediationContext, policy: Policy) -> dict[ActionKind, float]:
    """Each kind's current evidence threshold: its latest `evidence_threshold` entry, else the base."""
    out = dict.fromkeys(ActionKind, policy.base_threshold)
    seen: set[str] = set()
    for e in ctx.store.audit.timeline(action_type=THRESHOLD_ACTION, limit=1000):  # newest first
        kind = str(e.evidence.get("kind", ""))
        if kind in ActionKind._value2member_map_ and kind not in seen:
            seen.add(kind)
            out[ActionKind(kind)] = float(e.evidence["after"])
    return out


def priority(spec: ActionSpec) -> float:
    cls = REMEDIATIONS.get(spec.kind)
    cost = cls.cost if cls is not None else 1.0
    boost = USER_REPORTED_BOOST if spec.user_reported else 1.0
    return round(max(len(spec.answer_ids), 1) * spec.confidence * boost / cost, 6)


def rank_key(spec: ActionSpec) -> tuple[int, float]:
    return (0 if spec.user_reported else 1, -priority(spec))


def _is_direct(kind: ActionKind) -> bool:
    cls = REMEDIATIONS.get(kind)
    return cls is not None and cls.effect is Effect.DIRECT


def conflict_key(kind: str, component: str, dedupe_key: str) -> str:
    cls = REMEDIATIONS.get(ActionKind(kind)) if kind in ActionKind._value2member_map_ else None
    return cls.conflict_key(component, dedupe_key) if cls is not None else component


def expected_delta(spec: ActionSpec, baseline: GroupMeasurement | None) -> dict[str, Any] | None:
    if spec.expected_delta is not None or baseline is None:
        return spec.expected_delta
    value = EXPECTED_SHARE * spec.confidence * (1.0 - baseline.mean)
    return {"metric": "target_recall_at_k", "value": round(value, 4), "from": "confidence x headroom"}


def preview_expectation(d: Delta) -> dict[str, Any]:
    """A preview's delta as the expected one (`metric value [ci95] n`, the audit log's form)."""
    return {
        "metric": "target_recall_at_k",
        "value": round(d.diff, 4),
        "ci95": [round(d.lo, 4), round(d.hi, 4)],
        "n": d.n,
        "before": round(d.before, 4),
        "after": round(d.after, 4),
        "from": "preview",
    }


@dataclass
class Scheduler:
    ctx: RemediationContext
    policy: Policy = field(default_factory=Policy)
    worker: str = "scheduler"

    def __post_init__(self) -> None:
        self.actions = ImprovementActions(self.ctx.store.db, clock=self.ctx.clock)

    def due(self) -> list[ActionSpec]:
        now = self.ctx.clock.now()
        rows = self.actions.listed(status=("proposed", "scheduled"), limit=10_000)
        due = [
            r for r in rows if r.status == "proposed" or (r.lease_expires_at is not None and r.lease_expires_at <= now)
        ]
        specs = []
        for r in due:
            try:
                specs.append(ActionSpec.from_row(r))
            except ValueError:  # an unknown kind: nothing here can apply it
                continue
        return sorted(specs, key=lambda s: (*rank_key(s), s.action_id))

    def _busy(self) -> set[str]:
        rows = self.actions.listed(status="applied", limit=10_000)
        return {
            conflict_key(r.kind, r.component, r.dedupe_key)
            for r in rows
            if r.audit_due_at is not None and r.audited_at is None
        }

    def run(self) -> list[ScheduleResult]:
        thresholds = evidence_thresholds(self.ctx, self.policy)
        since = day_start(self.ctx.clock.now())
        applied_today: dict[str | None, int] = defaultdict(int)
        counted: set[str | None] = set()
        busy = self._busy()
        tier1 = tier1_state(self.ctx.store)
        out: list[ScheduleResult] = []
        serving = self._serving()
        for spec in self.due():
            if sum(r.outcome is Outcome.APPLIED for r in out) >= self.policy.max_per_pass:
                break
            if tier1.monitor and spec.kind is not ActionKind.TIER1_RECALIBRATION:
                out.append(self._result(spec, Outcome.DEFERRED_MONITOR, tier1.reason))
                continue
            direct = _is_direct(spec.kind)
            if spec.kind not in REMEDIATIONS:
                out.append(self._result(spec, Outcome.UNSUPPORTED, f"no remediation implements {spec.kind.value} yet"))
                continue
            waiting = make_remediation(spec).ready(self.ctx) if self._valid(spec) else None
            if waiting is not None:
                out.append(self._result(spec, Outcome.NOT_READY, waiting))
                continue
            if spec.confidence < thresholds[spec.kind]:
                out.append(
                    self._reject(
                        spec,
                        f"confidence {spec.confidence:.3f} < {spec.kind.value} threshold {thresholds[spec.kind]:.3f}",
                    )
                )
                continue
            if direct:
                if spec.domain not in counted:
                    counted.add(spec.domain)
                    applied_today[spec.domain] = self._applied_direct_since(since, spec.domain)
                if applied_today[spec.domain] >= self.policy.daily_cap:
                    out.append(
                        self._result(
                            spec, Outcome.DEFERRED_CAP, f"{self.policy.daily_cap} remediations of {spec.domain} today"
                        )
                    )
                    continue
                key = conflict_key(spec.kind.value, spec.component, spec.dedupe_key)
                if key in busy:
                    out.append(self._result(spec, Outcome.DEFERRED_CONFLICT, f"{key} has an unaudited change"))
                    continue
            if self._serving() != serving:
                break  # activated mid-pass: this would be fitted on the old version; the next pass has the new
            result = self.apply_one(spec)
            out.append(result)
            if result.outcome is Outcome.APPLIED and direct:
                applied_today[spec.domain] += 1
                busy.add(conflict_key(spec.kind.value, spec.component, spec.dedupe_key))
        return out

    def _serving(self) -> str | None:
        row = self.ctx.store.pipelines.current()
        return row.version_id if row is not None else None

    @staticmethod
    def _valid(spec: ActionSpec) -> bool:
        try:
            make_remediation(spec)
        except ValidationError:
            return False  # apply_one records it as failed
        return True

    def _applied_direct_since(self, since: Any, domain: str | None) -> int:
        return sum(self.actions.applied_since(since, domain=domain, kind=k.value) for k in ActionKind if _is_direct(k))

    def apply_one(self, spec: ActionSpec) -> ScheduleResult:
        ctx, now = replace(self.ctx, serving_at_apply=self._serving() or ""), self.ctx.clock.now()
        if not claim_action(ctx.store, spec.action_id, self.worker, now, self.policy.lease_s, conflict_key):
            return self._result(
                spec, Outcome.CLAIMED_ELSEWHERE, "claimed by another scheduler, or its component is busy"
            )
        attempts = spec.attempts + 1
        try:
            remediation = make_remediation(spec)
        except ValidationError as exc:
            self.actions.mark_failed(spec.action_id, f"invalid payload: {exc}", claimer=self.worker)
            return self._result(spec, Outcome.FAILED, "invalid payload")
        try:
            with self._holding(spec.action_id):
                group = remediation.group(ctx) if remediation.effect is Effect.DIRECT else None
                baseline = measure(ctx, group) if group is not None else None
                previewed = self._preview(remediation, group, baseline)
                if previewed is not None and not previewed.hi > 0:
                    return self._reject(
                        spec,
                        f"preview: target recall {previewed.before:.3f} -> {previewed.after:.3f} on {previewed.n} "
                        f"queries [{previewed.lo:+.3f}, {previewed.hi:+.3f}]: the change cannot gain",
                    )
                change = remediation.apply(ctx)
        except SupersededError as exc:
            return self._release(spec, exc, undone=False)
        except Exception as exc:  # the previous state still serves (each apply is atomic)
            retry = attempts < self.policy.max_attempts
            self.actions.mark_failed(spec.action_id, f"{type(exc).__name__}: {exc}", claimer=self.worker, retry=retry)
            return self._result(spec, Outcome.RETRY if retry else Outcome.FAILED, f"{type(exc).__name__}: {exc}")
        if change.effect is Effect.DIRECT:  # a candidate was checked as it was registered (`register_candidate`)
            try:
                check_serving(ctx)
            except SupersededError as exc:
                remediation.revert(ctx, change)
                return self._release(spec, exc, undone=True)
        change = change.model_copy(update={"group": group, "baseline": baseline})
        expected = expected_delta(spec, baseline) if previewed is None else preview_expectation(previewed)
        spec = spec.model_copy(update={"expected_delta": expected})
        try:
            log_id = self._record(spec, change)
        except Exception as exc:
            # lost the claim (its lease ran out and another scheduler took it) or the store failed:
            # undo the change, so what serves is what the audit log says
            remediation.revert(ctx, change)
            return self._result(
                spec, Outcome.CLAIMED_ELSEWHERE, f"not recorded, change undone: {type(exc).__name__}: {exc}"
            )
        return self._result(spec, Outcome.APPLIED, change.summary, log_id, change.candidate_version)

    @contextlib.contextmanager
    def _holding(self, action_id: str) -> Iterator[None]:
        """Keeps this claim's lease fresh while the action is measured and applied: a chunking fit
        can outlast a lease (minutes of embedding on 2 busy cores), and another scheduler must not
        take the action over and redo it meanwhile."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.policy.lease_s / 3):
                with contextlib.suppress(Exception):  # a store blip: the next beat tries again
                    extend_action(self.ctx.store, action_id, self.worker, self.ctx.clock.now(), self.policy.lease_s)

        beating = threading.Thread(target=beat, name=f"lease {action_id}", daemon=True)
        beating.start()
        try:
            yield
        finally:
            stop.set()
            beating.join()

    def _preview(
        self, remediation: Remediation[Any], group: QueryGroup | None, baseline: GroupMeasurement | None
    ) -> Delta | None:
        """Preview vs baseline on the group, when the kind can preview and the group has targets
        and questions to score (without them both sides are 0 by construction: no evidence either way)."""
        if group is None or baseline is None or not group.questions or not (group.chunk_ids or group.passages):
            return None
        after = remediation.preview(self.ctx, group, baseline)
        if after is None:
            return None
        s = self.ctx.settings
        return delta(baseline.scores, after.scores, resamples=s.resamples, seed=s.seed)

    def _record(self, spec: ActionSpec, change: AppliedChange) -> str:
        store, audit_after = self.ctx.store, self.policy.audit_window_s if change.effect is Effect.DIRECT else None
        with store.db.transaction():
            self.actions.mark_applied(
                spec.action_id,
                claimer=self.worker,
                revert_payload=change.model_dump(mode="json"),
                audit_after_s=audit_after,
                expected_delta=spec.expected_delta,
            )
            entry = store.audit.record(
                audit_action_type(spec.kind),
                triggered_by=f"action:{spec.action_id}",
                actor=self.worker,
                evidence={
                    "action_id": spec.action_id,
                    "domain": spec.domain,
                    "component": spec.component,
                    "answer_ids": list(spec.answer_ids),
                    "confidence": spec.confidence,
                    "diagnosis": spec.evidence,
                    "payload": spec.payload,
                    "effect": change.effect.value,
                    "summary": change.summary,
                    "candidate_version": change.candidate_version,
                    "baseline": change.baseline.model_dump(mode="json") if change.baseline else None,
                },
                pipeline_version_before=self.ctx.config.version_id,
                pipeline_version_after=change.candidate_version,
                expected_delta=spec.expected_delta,
            )
            for note in change.notes:
                store.audit.record(
                    note.action_type,
                    triggered_by=f"action:{spec.action_id}",
                    actor=self.worker,
                    evidence=note.evidence,
                    pipeline_version_before=note.pipeline_version_before,
                    pipeline_version_after=note.pipeline_version_after,
                    refers_to=entry.log_id,
                )
            self.actions.update_payload(spec.action_id, payload={"applied_log_id": entry.log_id})
            return entry.log_id

    def _release(self, spec: ActionSpec, exc: SupersededError, *, undone: bool) -> ScheduleResult:
        """Proposed again, audited: a direct change was live until it was undone, and an admin reading
        the timeline should see why a fit that ran left no change behind."""
        store = self.ctx.store
        try:
            with store.db.transaction():
                self.actions.release(spec.action_id, f"superseded: {exc}", claimer=self.worker)
                store.audit.record(
                    SUPERSEDED_ACTION,
                    triggered_by=f"action:{spec.action_id}",
                    actor=self.worker,
                    evidence={
                        "action_id": spec.action_id,
                        "kind": spec.kind.value,
                        "domain": spec.domain,
                        "reason": str(exc),
                        "undone": undone,
                    },
                    pipeline_version_before=exc.fitted_on or None,
                    pipeline_version_after=exc.serving,
                )
        except StoreConflictError:
            return self._result(spec, Outcome.CLAIMED_ELSEWHERE, "changed under us")
        return self._result(spec, Outcome.SUPERSEDED, str(exc))

    def _reject(self, spec: ActionSpec, reason: str) -> ScheduleResult:
        try:
            self.actions.reject(spec.action_id, reason)
        except StoreConflictError:
            return self._result(spec, Outcome.CLAIMED_ELSEWHERE, "changed under us")
        return self._result(spec, Outcome.REJECTED, reason)

    @staticmethod
    def _result(
        spec: ActionSpec, outcome: Outcome, detail: str, log_id: str | None = None, candidate: str | None = None
    ) -> ScheduleResult:
        return ScheduleResult(spec.action_id, spec.kind.value, spec.domain, outcome, detail, log_id, candidate)


def summarize(results: Sequence[ScheduleResult]) -> dict[str, int]:
    counts = dict.fromkeys((o.value for o in Outcome), 0)
    for r in results:
        counts[r.outcome.value] += 1
    return counts
