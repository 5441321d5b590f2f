"""Tier-1 recalibration on SQLite and PostgreSQL: labels from the judge, reviewers and user feedback
(with its stored weight), the held-out agreement that decides a replacement, the model versions in
the audit log, the weekly check on the loop's clock, and monitor mode in the scheduler."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from ragloop.cli.improve import status_data
from ragloop.config import PipelineConfig
from ragloop.improve import recalibration as rc
from ragloop.improve.clock import ManualClock
from ragloop.improve.evaluate import OnlineEvaluator
from ragloop.improve.remediate import revert_action, run_pass
from ragloop.improve.remediation import RemediationContext
from ragloop.improve.remediation.tier1 import refit
from ragloop.improve.routing import RoutingConfig
from ragloop.improve.scheduler import Outcome, Scheduler
from ragloop.improve.tier1 import FEATURES, PRIOR, HeuristicModel
from ragloop.improve.types import ActionKind
from ragloop.store import Store
from ragloop.store.vocabulary import Tier


def ctx(store: Store, clock: ManualClock) -> RemediationContext:
    def no_collections(name: str) -> Any:
        raise AssertionError(f"tier-1 recalibration opened collection {name!r}")

    return RemediationContext(
        store=store, config=PipelineConfig(), collections=no_collections, expansion_backend=no_collections, clock=clock
    )


def features(rng: random.Random) -> dict[str, float | None]:
    f: dict[str, float | None] = {k: round(rng.random(), 4) for k in FEATURES}
    f["refused"] = 0.0
    return f


def quality(f: dict[str, float | None]) -> float:
    """The truth the labels follow: support alone (the prior spreads its weight over five features)."""
    return round(float(f["support"] or 0.0), 4)


def answered(store: Store, f: dict[str, float | None], n: int) -> str:
    a = store.queries.record_answer(session_id="s", question=f"q{n}?", answer_text="a [1]", pipeline_version="pv-x")
    store.evaluations.add(a.answer_id, Tier.HEURISTIC, scores=f, heuristic_score=PRIOR.score(f))
    return a.answer_id


def judged(store: Store, n: int, *, seed: int = 0, truth: Any = quality) -> list[str]:
    rng = random.Random(seed)
    ids = []
    with store.db.transaction():
        for i in range(n):
            f = features(rng)
            answer_id = answered(store, f, i)
            store.evaluations.add(answer_id, Tier.LLM_JUDGE, scores={}, failure_evidence={"overall": truth(f)})
            ids.append(answer_id)
    return ids


def inverted(f: dict[str, float | None]) -> float:
    """A truth the prior gets backwards (it weighs support positively), yet linear: a refit learns it."""
    return round(1.0 - float(f["support"] or 0.0), 4)


def test_labels_carry_source_and_weight_and_need_tier1_features(store: Store) -> None:
    f = {k: 0.5 for k in FEATURES}
    a = answered(store, f, 1)
    store.evaluations.add(a, Tier.LLM_JUDGE, scores={}, failure_evidence={"overall": 0.9})
    store.evaluations.add(a, Tier.HUMAN, scores={"faithfulness": 0.4, "answer_relevance": 0.6})
    store.feedback.add(a, "negative", corrected_answer="It was 1887.")
    b = answered(store, f, 2)
    store.evaluations.add(b, Tier.HUMAN, scores={}, failure_mode="generation_failure")
    store.feedback.add(b, "positive")
    orphan = store.queries.record_answer(session_id="s", question="q?", answer_text="x", pipeline_version="pv-x")
    store.feedback.add(orphan.answer_id, "positive")  # no tier-1 evaluation: no features, no label
    labels = {(lb.answer_id, lb.source): lb for lb in rc.collect_labels(store)}
    assert len(labels) == 5 and orphan.answer_id not in {k[0] for k in labels}
    assert labels[(a, rc.LabelSource.JUDGE)].target == 0.9 and labels[(a, rc.LabelSource.JUDGE)].weight == 1.0
    review = labels[(a, rc.LabelSource.REVIEWER)]
    assert review.target == pytest.approx(0.5) and review.weight == rc.REVIEWER_WEIGHT
    fb = labels[(a, rc.LabelSource.FEEDBACK)]
    assert fb.target == 0.0 and fb.weight == 3.0  # the stored weight: a rating plus a correction
    assert labels[(b, rc.LabelSource.REVIEWER)].target == 0.0 and labels[(b, rc.LabelSource.FEEDBACK)].target == 1.0
    assert labels[(a, rc.LabelSource.JUDGE)].features == f
    assert rc.sources_of(labels.values())["user_feedback"] == {"labels": 2, "weight": 5.0}


def test_agreement_is_weighted_by_label_and_bands_are_three() -> None:
    assert [rc.band(x) for x in (0.8, 0.79, 0.6, 0.59)] == ["high", "medium", "medium", "low"]
    model = HeuristicModel({"support": 1.0}, 0.0, "s")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    labels = [
        rc.Label("a", {"support": 0.9}, 0.95, 1.0, rc.LabelSource.JUDGE, now),  # high/high
        rc.Label("b", {"support": 0.9}, 0.10, 3.0, rc.LabelSource.FEEDBACK, now),  # high/low, heavy
    ]
    agr = rc.agreement(model, labels, resamples=200)
    assert agr.value == pytest.approx(0.25) and agr.labels == 2 and agr.answers == 2 and agr.lo <= 0.25 <= agr.hi


def test_a_refit_replaces_only_when_held_out_agreement_clears_the_bar(store: Store) -> None:
    judged(store, 300)
    labels = rc.collect_labels(store)
    model, ev = refit(labels, PRIOR, resamples=300)
    assert model is not None and ev["decision"] == "replaced"
    assert ev["held_out"]["labels"] + ev["train"]["labels"] == 300 and 30 <= ev["held_out"]["labels"] <= 90
    assert ev["agreement_fitted"]["value"] >= 0.87 and ev["agreement_gain"]["lo"] > 0
    assert ev["agreement_serving"]["value"] < ev["agreement_fitted"]["value"]
    assert model.weights["support"] == pytest.approx(1.0, abs=0.05)
    noise = random.Random(5)
    shuffled = [rc.Label(lb.answer_id, lb.features, noise.random(), lb.weight, lb.source, lb.at) for lb in labels]
    kept, ev2 = refit(shuffled, PRIOR, resamples=300)
    assert kept is None and ev2["decision"] == "kept" and ev2["agreement_fitted"]["value"] < 0.87


def test_the_label_buffer_proposes_a_refit_the_scheduler_applies_and_an_admin_can_revert(store: Store) -> None:
    clock = ManualClock()
    c = ctx(store, clock)
    assert rc.watch(store, clock)["decision"] == "insufficient"  # type: ignore[index]  # this week's check, done
    judged(store, rc.BUFFER_SIZE - 1)
    rc.watch(store, clock, resamples=200)
    assert store.improvement_actions.listed(kind=ActionKind.TIER1_RECALIBRATION.value) == []
    judged(store, 1, seed=9)
    rc.watch(store, clock, resamples=200)
    [action] = store.improvement_actions.listed(kind=ActionKind.TIER1_RECALIBRATION.value)
    assert action.evidence["trigger"] == "label_buffer" and action.evidence["new_labels"] == rc.BUFFER_SIZE
    [result] = Scheduler(c).run()
    assert result.outcome is Outcome.APPLIED, result.detail
    fitted = rc.active_model(store)
    assert fitted != PRIOR and fitted.trained_on > 100
    [refit_entry] = store.audit.timeline(action_type=rc.REFIT_ENTRY)
    [model_entry] = store.audit.timeline(action_type=rc.MODEL_ENTRY)
    assert refit_entry.evidence["decision"] == "replaced" and model_entry.evidence["previous"]["name"] == "prior"
    assert model_entry.refers_to == refit_entry.refers_to  # both written with the action's own entry
    rc.watch(store, clock, resamples=200)  # the refit consumed the buffer: nothing new is proposed
    assert len(store.improvement_actions.listed(kind=ActionKind.TIER1_RECALIBRATION.value)) == 1
    revert_action(store, action.action_id, actor="admin:k", config=PipelineConfig(), clock=clock)
    assert rc.active_model(store) == PRIOR and len(store.audit.timeline(action_type=rc.MODEL_ENTRY)) == 2


def test_the_weekly_check_runs_once_a_week_and_low_agreement_means_monitor_mode(store: Store) -> None:
    clock = ManualClock()
    c = ctx(store, clock)
    ev = rc.watch(store, clock, resamples=200)
    assert ev is not None and ev["decision"] == "insufficient"
    judged(store, 60, truth=inverted)
    assert rc.watch(store, clock) is None  # not a week yet
    clock.advance(days=7)
    ev = rc.watch(store, clock, resamples=200)
    assert ev is not None and ev["decision"] == "monitor" and ev["labels"] == 60 and ev["agreement"]["value"] < 0.75
    assert rc.state(store).monitor
    assert status_data(store)["tier1"] == {
        "model": PRIOR.version,
        "monitor_mode": True,
        "state": rc.state(store).reason,
    }
    [recal] = store.improvement_actions.listed(kind=ActionKind.TIER1_RECALIBRATION.value)
    assert recal.evidence["trigger"] == "weekly_agreement"
    other = store.improvement_actions.propose(
        ActionKind.KNOWLEDGE_GAP_LOG.value, "knowledge_gaps:kb", "g1", domain="kb", evidence={"confidence": 0.9}
    ).action
    results = {r.action_id: r for r in Scheduler(c).run()}
    assert results[other.action_id].outcome is Outcome.DEFERRED_MONITOR
    # the recalibration itself is not deferred (it waits for its 200 labels)
    assert results[recal.action_id].outcome is Outcome.NOT_READY
    assert store.improvement_actions.get(other.action_id).status == "proposed"
    judged(store, 200, seed=3, truth=inverted)
    report = run_pass(store, PipelineConfig(), clock=clock, context=c)
    assert [r.outcome for r in report.scheduled if r.action_id == recal.action_id] == [Outcome.APPLIED]
    assert rc.active_model(store).weights["support"] == pytest.approx(-1.0, abs=0.05)
    assert not rc.state(store).monitor  # the replacement ends monitor mode until the next check
    [result] = Scheduler(c).run()
    assert result.action_id == other.action_id and result.outcome is not Outcome.DEFERRED_MONITOR


def test_the_evaluator_scores_with_the_active_model(store: Store) -> None:
    ticks = [0.0]
    ev = OnlineEvaluator(store, RoutingConfig(), clock=lambda: ticks[0])
    assert ev.model == PRIOR and ev.evaluator_name(Tier.HEURISTIC) == f"heuristic:{PRIOR.version}"
    fitted = HeuristicModel({"support": 1.0}, 0.0, "fit")
    store.audit.record(rc.MODEL_ENTRY, triggered_by="test", evidence=rc.model_entry(fitted, previous=PRIOR, why={}))
    assert ev.model == PRIOR  # cached for MODEL_TTL_S
    ticks[0] += rc.MODEL_TTL_S + 1
    assert ev.model == fitted
    assert OnlineEvaluator(store, RoutingConfig(), model=PRIOR).model == PRIOR  # a fixed model stays fixed
