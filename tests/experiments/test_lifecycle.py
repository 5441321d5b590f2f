"""Experiments end to end on the store (SQLite and PostgreSQL): aggregation, guardrail halts,
promotion rules (duration, smoke test, exactly one winner), the golden set and the regression run."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ragloop.config import PipelineConfig
from ragloop.evaluation.golden import load_golden
from ragloop.experiments import ComputedAssigner, ExperimentStatus, Variant
from ragloop.experiments.aggregation import aggregate
from ragloop.experiments.golden import export_jsonl, import_jsonl, is_held_out, working_set
from ragloop.experiments.promotion import MaintenanceWindow, SmokeResult, promote_experiment
from ragloop.experiments.registry import ExperimentError, ExperimentSpec, create_experiment
from ragloop.experiments.regression import Answered, run_regression
from ragloop.experiments.versions import ConfigError, diff_versions, register_candidate
from ragloop.store import Store
from tests.store.conftest import FakeClock


def _base(store: Store) -> str:
    row = store.pipelines.register_config(PipelineConfig())
    store.pipelines.activate(row.version_id, reason="test")
    return row.version_id


def _spec(**kw: object) -> ExperimentSpec:
    body: dict[str, object] = {
        "name": "k3",
        "treatment": {"retrieval": {"k": 3}},
        "traffic_split": 0.5,
        "min_sample_size": 40,
        "min_duration": 3600,
        "primary_metric": "tier1_score",
        "guardrail_metrics": ["faithfulness"],
    }
    return ExperimentSpec.model_validate(body | kw)


def _serve(store: Store, eid: str, variant: Variant, n: int, tier1: float, faith: float, version: str) -> None:
    for i in range(n):
        wobble = ((i % 5) - 2) * 0.02
        ans = store.queries.record_answer(
            session_id=f"{variant}-{i}",
            question=f"q{i}",
            answer_text="a",
            pipeline_version=version,
            latency_ms=100 + i % 7,
            experiment_id=eid,
            variant=variant.value,
        )
        store.evaluations.add(ans.answer_id, "heuristic", heuristic_score=tier1 + wobble)
        store.evaluations.add(ans.answer_id, "llm_judge", scores={"faithfulness": faith + wobble})


def test_invalid_specs_are_refused_with_the_reason(store: Store) -> None:
    _base(store)
    for bad, needle in (
        ({"traffic_split": 0.9}, "traffic_split"),
        ({"primary_metric": "nope"}, "unknown metric"),
    ):
        with pytest.raises(ValueError, match=needle):
            _spec(**bad)
    with pytest.raises(ExperimentError, match="control = treatment"):
        create_experiment(store, _spec(treatment={"retrieval": {"k": 5}}), actor="t")  # k=5 is the default
    with pytest.raises(ExperimentError, match="unknown config key"):
        create_experiment(store, _spec(treatment={"retrieval": {"kk": 3}}), actor="t")


def test_guardrail_breach_halts_at_once_and_sends_everyone_to_control(store: Store, clock: FakeClock) -> None:
    _base(store)
    exp = create_experiment(store, _spec(), actor="t", clock=clock)
    _serve(store, exp.experiment_id, Variant.CONTROL, 60, 0.5, 0.9, exp.control_version or "")
    _serve(store, exp.experiment_id, Variant.TREATMENT, 60, 0.8, 0.5, exp.treatment_version or "")
    res = aggregate(store, exp.experiment_id, clock)
    assert res["status"] == "halted" and res["recommendation"] == "halted"
    assert res["guardrail_breaches"][0]["metric"] == "faithfulness"
    row = store.experiments.get(exp.experiment_id)
    assert row is not None and row.status == "halted" and "guardrail" in (row.status_reason or "")
    assert store.audit.timeline(action_type="experiment_halt")
    assigned = ComputedAssigner().assign(exp.experiment_id, "s", 0.5, ExperimentStatus(row.status))
    assert assigned.variant is Variant.CONTROL
    assert store.pipelines.current().version_id != exp.treatment_version  # type: ignore[union-attr]


def test_promotion_waits_for_the_duration_then_switches_and_keeps_the_previous(store: Store, clock: FakeClock) -> None:
    base = _base(store)
    exp = create_experiment(store, _spec(control={}), actor="t", clock=clock)
    assert exp.control_version == base
    _serve(store, exp.experiment_id, Variant.CONTROL, 60, 0.5, 0.9, base)
    _serve(store, exp.experiment_id, Variant.TREATMENT, 60, 0.8, 0.9, exp.treatment_version or "")
    first = aggregate(store, exp.experiment_id, clock)
    assert first["recommendation"] == "continue" and first["status"] == "running"  # significant, too early
    assert first["p_value"]["always_valid"] < 0.05
    clock.advance(3601)
    closed = MaintenanceWindow((clock.now.hour + 1) % 24, (clock.now.hour + 2) % 24)
    held = aggregate(store, exp.experiment_id, clock, window=closed)
    assert held["recommendation"] == "promote_treatment" and held["promotion"]["promoted"] is False
    done = aggregate(store, exp.experiment_id, clock, smoke_test=lambda v: SmokeResult(True, {"v": v}))
    assert done["promotion"]["promoted"] is True
    current = store.pipelines.current()
    assert current is not None and current.version_id == exp.treatment_version
    assert current.previous_version_id == base and current.promoted_via == "experiment"
    assert current.quality_at_promotion["tier1_score"] > 0.7
    assert store.experiments.get(exp.experiment_id).status == "promoted"  # type: ignore[union-attr]
    assert store.pipelines.rollback(reason="instant rollback").version_id == base


@pytest.mark.parametrize("turns_per_session", [1, 15])
def test_an_arm_s_sessions_not_its_answers_are_the_independent_units(
    store: Store, clock: FakeClock, turns_per_session: int
) -> None:
    """60 answers an arm with the same scores: from 60 one-turn sessions the +0.1 is clear; from 4
    sessions of 15 alike turns (the unit assignment randomises) it rests on 4 sessions an arm."""
    _base(store)
    exp = create_experiment(store, _spec(), actor="t", clock=clock)
    for variant, shift, version in (
        (Variant.CONTROL, 0.0, exp.control_version),
        (Variant.TREATMENT, 0.1, exp.treatment_version),
    ):
        for i in range(60):
            g = i // 15  # the score is its block's, whether the block is one session or fifteen
            ans = store.queries.record_answer(
                session_id=f"{variant}-{i // turns_per_session}",
                question=f"q{i}",
                answer_text="a",
                pipeline_version=version or "",
                experiment_id=exp.experiment_id,
                variant=variant.value,
            )
            score = (0.4, 0.6, 0.45, 0.55)[g] + shift + ((i % 3) - 1) * 0.01
            store.evaluations.add(ans.answer_id, "heuristic", heuristic_score=score)
            store.evaluations.add(ans.answer_id, "llm_judge", scores={"faithfulness": 0.9})
    res = aggregate(store, exp.experiment_id, clock)
    tier1 = res["metrics"]["tier1_score"]
    sessions = 60 // turns_per_session
    assert (tier1["control"]["n"], tier1["control"]["sessions"], tier1["treatment"]["sessions"]) == (
        60,
        sessions,
        sessions,
    )
    welch = tier1["comparison"]["welch"]
    assert tier1["comparison"]["difference"] == pytest.approx(0.1)
    if turns_per_session == 1:
        assert welch["p_value"] < 0.001 and welch["df"] > 100
    else:
        assert welch["p_value"] > 0.05 and welch["df"] < 7
        assert tier1["treatment"]["ci95"]["lo"] < tier1["control"]["mean"]


def test_a_failed_smoke_test_aborts_the_promotion(store: Store, clock: FakeClock) -> None:
    base = _base(store)
    exp = create_experiment(store, _spec(min_duration=0), actor="t", clock=clock)
    out = promote_experiment(
        store, exp.experiment_id, evidence={}, clock=clock, smoke_test=lambda v: SmokeResult(False, {"why": "x"})
    )
    assert not out.promoted and out.status == "stopped"
    assert store.pipelines.current().version_id == base  # type: ignore[union-attr]
    assert store.audit.timeline(action_type="experiment_promotion_aborted")


def test_two_aggregators_never_double_promote(store: Store, clock: FakeClock) -> None:
    _base(store)
    exp = create_experiment(store, _spec(min_duration=0), actor="t", clock=clock)
    barrier = threading.Barrier(4)
    outcomes: list[bool] = []

    def go() -> None:
        barrier.wait()
        outcomes.append(promote_experiment(store, exp.experiment_id, evidence={}, clock=clock).promoted)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == [False, False, False, True]
    assert len(store.audit.timeline(action_type="pipeline_activate")) == 2  # the base, then the one promotion
    assert store.pipelines.current().version_id == exp.treatment_version  # type: ignore[union-attr]


def test_candidates_and_diffs(store: Store) -> None:
    base = _base(store)
    row = register_candidate(store, {"retrieval": {"mode": "bm25"}}, created_by="m")
    assert row.status == "candidate" and row.parent_version_id == base and row.created_by == "m"
    assert [c.path for c in diff_versions(store, base, row.version_id)] == ["retrieval.mode"]
    assert register_candidate(store, {"retrieval": {"mode": "bm25"}}, created_by="other").created_by == "m"
    with pytest.raises(ConfigError, match="unknown config key"):
        register_candidate(store, {"retrieval": {"mood": "bm25"}}, created_by="m")
    assert store.pipelines.current().version_id == base  # type: ignore[union-attr]


def _golden(tmp_path: Path, n: int = 30) -> Path:
    import json

    p = tmp_path / "g.jsonl"
    p.write_text(
        "".join(
            json.dumps(
                {
                    "question": f"What is item {i}?",
                    "expected_answer": f"item {i} is red",
                    "required_doc_ids": [f"d{i}.md"],
                }
            )
            + "\n"
            for i in range(n)
        )
    )
    return p


def test_golden_import_export_and_held_out(store: Store, tmp_path: Path) -> None:
    src = _golden(tmp_path)
    res = import_jsonl(store, src, created_by="t")
    assert res.added == 30 and 0 < res.held_out < 15
    assert import_jsonl(store, src, created_by="t").added == 0  # repeatable
    held = {e.question for e in store.golden.current_golden_set() if e.held_out}
    assert held == {f"What is item {i}?" for i in range(30) if is_held_out(f"What is item {i}?")}
    assert not any(e.held_out for e in working_set(store))
    out = tmp_path / "out.jsonl"
    assert export_jsonl(store, out) == 30
    items = load_golden(out)  # the harness's own loader reads the export
    assert {it.relevant_doc_ids[0] for it in items} == {f"d{i}.md" for i in range(30)}
    assert import_jsonl(store, out, created_by="t").added == 0  # the export imports back as the same set


def test_regression_detects_a_drop_and_rolls_back(store: Store, tmp_path: Path) -> None:
    good_version = _base(store)
    import_jsonl(store, _golden(tmp_path), created_by="t")

    def good(q: str) -> Answered:
        i = q.split()[-1].rstrip("?")
        return Answered(f"item {i} is red", [f"d{i}.md"], False)

    def bad(q: str) -> Answered:
        return Answered("no idea", [], False)

    first = run_regression(store, good, pipeline_version=good_version)
    assert first.run_status == "completed" and not first.regression_detected and first.metrics["doc_recall"] == 1.0
    same = run_regression(store, good, pipeline_version=good_version)
    assert not same.regression_detected
    worse = register_candidate(store, {"retrieval": {"k": 2}}, created_by="t")
    store.pipelines.activate(worse.version_id, reason="deliberately worse")
    hit = run_regression(store, bad, pipeline_version=worse.version_id)
    assert hit.regression_detected and hit.rollback_triggered and hit.rolled_back_to == good_version
    assert store.pipelines.current().version_id == good_version  # type: ignore[union-attr]
    assert store.audit.timeline(action_type="regression_detected")
    run = store.regressions.get(hit.run_id)
    assert run is not None and run.regression_detected and run.rollback_triggered
    assert all(c["ci95"][1] < 0 for c in run.report["comparisons"] if c["regressed"])
