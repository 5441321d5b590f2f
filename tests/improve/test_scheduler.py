"""The scheduler's rules on a manual clock: the per-domain daily cap, component serialisation,
evidence thresholds, user-reported first, the audit entry of each application, failures."""

from __future__ import annotations

import time

import pytest
from pydantic import BaseModel

from ragloop.improve.claims import claim_action
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediation import (
    REMEDIATIONS,
    ActionSpec,
    AppliedChange,
    Effect,
    RegistryExpansionBackend,
    Remediation,
    RemediationContext,
)
from ragloop.improve.remediation.base import register_candidate
from ragloop.improve.scheduler import THRESHOLD_ACTION, Outcome, Policy, Scheduler, ScheduleResult, conflict_key
from ragloop.improve.types import ActionKind
from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from tests.improve.remediation_support import K1, QUESTION, chunk_of, context, propose_expansion, propose_rechunk

QUESTIONS = [f"What happened in Ostria in {1900 + i}?" for i in range(6)]


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    return sqlite_store


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def _by_outcome(results: list[ScheduleResult], outcome: Outcome) -> list[str]:
    return [r.action_id for r in results if r.outcome is outcome]


def test_at_most_n_per_domain_per_day_on_the_clock(store: Store, coll: Collection, clock: ManualClock) -> None:
    ferry = chunk_of(coll, "ferry.md")
    ids = [
        propose_expansion(store, coll, q, [ferry], answers=len(QUESTIONS) - i).action_id
        for i, q in enumerate(QUESTIONS)
    ]
    sched = Scheduler(context(store, coll, clock, paraphrases=False), Policy(daily_cap=5))
    first = sched.run()
    assert _by_outcome(first, Outcome.APPLIED) == ids[:5]  # by impact: the most answers first
    assert _by_outcome(first, Outcome.DEFERRED_CAP) == ids[5:]
    clock.advance(3600 * 10)  # later the same day (12:00 + 10 h)
    assert _by_outcome(sched.run(), Outcome.DEFERRED_CAP) == ids[5:]
    clock.advance(3600 * 2)  # past midnight: a new day
    assert _by_outcome(sched.run(), Outcome.APPLIED) == ids[5:]
    assert store.improvement_actions.counts()["applied"] == 6


def test_a_pass_stops_when_another_version_is_activated_mid_way(
    store: Store, coll: Collection, clock: ManualClock
) -> None:
    """A pass fits and applies against the version it started with; once another is activated, the
    rest wait for the next pass, which has the new version (a long pass on a fast simulated clock
    otherwise re-chunked and re-fitted the old version's pool after its successor was serving)."""
    ferry = chunk_of(coll, "ferry.md")
    ids = [propose_expansion(store, coll, q, [ferry], answers=3 - i).action_id for i, q in enumerate(QUESTIONS[:3])]
    sched = Scheduler(context(store, coll, clock, paraphrases=False), Policy(daily_cap=10))
    apply_one = sched.apply_one

    def apply_then_activate(spec: ActionSpec) -> ScheduleResult:
        result = apply_one(spec)
        successor = K1.with_overrides(retrieval={"k": 2})
        store.pipelines.register_config(successor)
        store.pipelines.activate(successor.version_id, actor="test")
        return result

    sched.apply_one = apply_then_activate  # type: ignore[method-assign]
    first = sched.run()
    assert [r.action_id for r in first] == ids[:1] and first[0].outcome is Outcome.APPLIED
    assert store.improvement_actions.counts()["proposed"] == 2  # left for the next pass, not dropped
    sched.apply_one = apply_one  # type: ignore[method-assign]
    assert _by_outcome(sched.run(), Outcome.APPLIED) == ids[1:]


def _activate_successor(store: Store) -> str:
    successor = K1.with_overrides(retrieval={"k": 2})
    store.pipelines.register_config(successor)
    store.pipelines.activate(successor.version_id, actor="test")
    return successor.version_id


def test_a_direct_change_applied_while_another_version_was_activated_is_undone_and_redone(
    store: Store, coll: Collection, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 8 inside one apply: the change was measured and written for the version that stopped
    serving while it ran, so it is undone, not recorded, and proposed again without spending an
    attempt; the next pass applies it on the new version."""
    action = propose_expansion(store, coll, QUESTION, [chunk_of(coll, "ferry.md")])
    cls = REMEDIATIONS[ActionKind.EXPANSION_CACHE]
    original = cls.apply
    successors: list[str] = []

    def apply_while_activating(self: object, ctx: RemediationContext) -> AppliedChange:
        change = original(self, ctx)  # type: ignore[arg-type]
        successors.append(_activate_successor(store))
        return change

    monkeypatch.setattr(cls, "apply", apply_while_activating)
    backend = RegistryExpansionBackend(coll.registry)
    sched = Scheduler(context(store, coll, clock, paraphrases=False), Policy(max_attempts=1))
    [result] = sched.run()
    assert result.outcome is Outcome.SUPERSEDED and successors[0] in result.detail
    assert backend.entries() == []  # undone
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.status == "proposed" and row.attempts == 0 and row.claimed_by is None
    assert "superseded" in (row.error or "")
    assert store.audit.timeline(action_type="remediation:expansion_cache") == []
    [entry] = store.audit.timeline(action_type="remediation_superseded")
    assert entry.evidence["undone"] is True and entry.pipeline_version_after == successors[0]
    monkeypatch.setattr(cls, "apply", original)
    assert [r.outcome for r in sched.run()] == [Outcome.APPLIED]  # max_attempts 1: the release cost none
    assert len(backend.entries()) == 1


class _Payload(BaseModel):
    collection: str


class _FitThenRegister(Remediation[_Payload]):
    """A candidate kind whose fit outlasts an activation: it registers k=3 on the version it read."""

    kind = ActionKind.CHUNKING_BUFFER
    effect = Effect.CANDIDATE
    cost = 1.0
    payload_type = _Payload
    activate_during_fit = True

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        if self.activate_during_fit:
            _activate_successor(ctx.store)
        cfg = ctx.config.with_overrides(retrieval={"k": 3})
        version = register_candidate(ctx, cfg, self.kind, "k 1 -> 3")
        return AppliedChange(kind=self.kind, effect=self.effect, summary="k 3", candidate_version=version)

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        return None


def test_a_candidate_fitted_on_a_version_that_stopped_serving_is_never_registered(
    store: Store, coll: Collection, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered, the auto-experiment step would rebase the stale candidate and trial a change whose
    evidence (and error-budget spending) no audit entry holds; it is dropped and refitted instead."""
    monkeypatch.setitem(REMEDIATIONS, ActionKind.CHUNKING_BUFFER, _FitThenRegister)
    action = store.improvement_actions.propose(
        ActionKind.CHUNKING_BUFFER.value,
        f"chunking:{coll.name}",
        "pool",
        domain=coll.name,
        answer_ids=["a-1"],
        evidence={"confidence": 0.8},
        payload={"collection": coll.name},
    ).action
    sched = Scheduler(context(store, coll, clock, paraphrases=False), Policy())
    [result] = sched.run()
    stale = K1.with_overrides(retrieval={"k": 3}).version_id
    assert result.outcome is Outcome.SUPERSEDED and result.candidate_version is None
    assert store.pipelines.get(stale) is None
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.status == "proposed" and row.attempts == 0
    [entry] = store.audit.timeline(action_type="remediation_superseded")
    assert entry.evidence["undone"] is False and entry.evidence["kind"] == "chunking_buffer"
    monkeypatch.setattr(_FitThenRegister, "activate_during_fit", False)
    [again] = sched.run()
    assert again.outcome is Outcome.APPLIED and store.pipelines.get(again.candidate_version or "") is not None


def test_conflicting_remediations_on_one_component_are_serialised(
    store: Store, coll: Collection, clock: ManualClock
) -> None:
    a = propose_rechunk(store, coll, "bridge.md", "generation:1", QUESTION, answers=3)  # the higher priority
    b = propose_rechunk(store, coll, "bridge.md", "generation:2", QUESTION)
    other = propose_rechunk(store, coll, "tower.md", "generation:1", "How tall is the Quill Tower?")
    ctx = context(store, coll, clock, paraphrases=False)
    sched = Scheduler(ctx, Policy(audit_window_s=60))
    results = sched.run()
    assert sorted(_by_outcome(results, Outcome.APPLIED)) == sorted([a.action_id, other.action_id])
    assert _by_outcome(results, Outcome.DEFERRED_CONFLICT) == [b.action_id]
    clock.advance(30)
    assert _by_outcome(sched.run(), Outcome.DEFERRED_CONFLICT) == [b.action_id]
    store.improvement_actions.mark_kept(a.action_id, actual_delta={"diff": 1.0})  # audited
    assert _by_outcome(sched.run(), Outcome.APPLIED) == [b.action_id]


def test_expansion_entries_of_different_questions_do_not_conflict(
    store: Store, coll: Collection, clock: ManualClock
) -> None:
    ferry = chunk_of(coll, "ferry.md")
    ids = [propose_expansion(store, coll, q, [ferry]).action_id for q in QUESTIONS[:2]]
    rows = [store.improvement_actions.get(i) for i in ids]
    assert len({r.component for r in rows if r is not None}) == 1  # the pass gives them one component
    results = Scheduler(context(store, coll, clock, paraphrases=False)).run()
    assert sorted(_by_outcome(results, Outcome.APPLIED)) == sorted(ids)


def test_each_application_is_audited_with_its_evidence(store: Store, coll: Collection, clock: ManualClock) -> None:
    ferry = chunk_of(coll, "ferry.md")
    action = propose_expansion(store, coll, QUESTION, [ferry], confidence=0.9)
    [result] = Scheduler(context(store, coll, clock), Policy(audit_window_s=7200), worker="w1").run()
    assert result.outcome is Outcome.APPLIED and result.audit_log_id
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.status == "applied" and row.claimed_by == "w1"
    assert row.applied_at == clock.now() and row.audit_due_at is not None
    assert (row.audit_due_at - row.applied_at).total_seconds() == 7200
    assert row.payload["applied_log_id"] == result.audit_log_id
    change = AppliedChange.model_validate(row.revert_payload)
    assert change.group is not None and QUESTION in change.group.questions and len(change.group.questions) > 1
    assert change.baseline is not None and len(change.baseline.scores) == len(change.group.questions)
    entry = store.audit.get(result.audit_log_id)
    assert entry is not None and entry.action_type == "remediation:expansion_cache"
    # no expected delta in the proposal: confidence x headroom x 0.5, headroom 1 - baseline mean
    headroom = 1.0 - change.baseline.mean
    assert entry.expected_delta == {
        "metric": "target_recall_at_k",
        "value": round(0.5 * 0.9 * headroom, 4),
        "from": "confidence x headroom",
    }
    assert row.expected_delta == entry.expected_delta
    assert entry.evidence["payload"]["chunk_ids"] == [ferry] and entry.evidence["confidence"] == 0.9
    assert entry.evidence["baseline"]["scores"] == list(change.baseline.scores)
    backend = RegistryExpansionBackend(coll.registry)
    assert [e.chunk_ids for e in backend.entries()] == [(ferry,)]


def test_user_reported_first_and_thresholds_reject(store: Store, coll: Collection, clock: ManualClock) -> None:
    ferry = chunk_of(coll, "ferry.md")
    big = propose_expansion(store, coll, QUESTIONS[0], [ferry], answers=5)
    urgent = propose_expansion(store, coll, QUESTIONS[1], [ferry], answers=1, user_reported=True)
    weak = propose_expansion(store, coll, QUESTIONS[2], [ferry], confidence=0.55)
    store.audit.record(
        THRESHOLD_ACTION, triggered_by="test", evidence={"kind": "expansion_cache", "before": 0.5, "after": 0.6}
    )
    results = Scheduler(context(store, coll, clock, paraphrases=False)).run()
    assert _by_outcome(results, Outcome.APPLIED) == [urgent.action_id, big.action_id]
    assert _by_outcome(results, Outcome.REJECTED) == [weak.action_id]
    row = store.improvement_actions.get(weak.action_id)
    assert (
        row is not None and row.status == "rejected" and "0.550 < expansion_cache threshold 0.600" in (row.error or "")
    )


def test_a_failing_apply_is_retried_then_fails_and_changes_nothing(
    store: Store, coll: Collection, clock: ManualClock
) -> None:
    action = propose_expansion(store, coll, QUESTION, ["no-such-chunk"])
    sched = Scheduler(context(store, coll, clock, paraphrases=False), Policy(max_attempts=2))
    assert [r.outcome for r in sched.run()] == [Outcome.RETRY]
    assert [r.outcome for r in sched.run()] == [Outcome.FAILED]
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.status == "failed" and "none of the oracle chunks" in (row.error or "")
    assert RegistryExpansionBackend(coll.registry).entries() == []
    assert store.audit.timeline(action_type="remediation:expansion_cache") == []


def test_an_apply_that_outlasts_its_lease_keeps_its_claim(
    store: Store, coll: Collection, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunking fit can run for minutes: while it runs, its lease is renewed, so another scheduler
    cannot take the action over and apply it a second time."""
    action = propose_expansion(store, coll, QUESTION, [chunk_of(coll, "ferry.md")])
    cls = REMEDIATIONS[ActionKind.EXPANSION_CACHE]
    original = cls.apply
    taken_over: list[bool] = []

    def slow_apply(self: object, ctx: RemediationContext) -> AppliedChange:
        clock.advance(3600)  # far past the 0.3 s lease the claim was taken with
        time.sleep(0.5)  # wall time: the heartbeat's beats
        taken_over.append(claim_action(store, action.action_id, "other", clock.now(), 600.0, conflict_key))
        return original(self, ctx)  # type: ignore[arg-type]

    monkeypatch.setattr(cls, "apply", slow_apply)
    sched = Scheduler(context(store, coll, clock, paraphrases=False), Policy(lease_s=0.3))
    assert [r.outcome for r in sched.run()] == [Outcome.APPLIED]
    assert taken_over == [False]
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.status == "applied" and row.claimed_by == sched.worker and row.attempts == 1
