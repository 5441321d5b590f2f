"""A switch of the current version gets its actual delta once its window has passed: the answers the
new version served against those the old one served, per online metric with n and an interval; once
per switch, never before its window, the expected delta beside it."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from ragloop.cli import app
from ragloop.config import PipelineConfig
from ragloop.experiments.activation_audit import ACTION, audit_activations, delta_text, experiment_expectation
from ragloop.store import Store


def _serve(store: Store, version: str, tier1: list[float], ratings: list[str]) -> None:
    for i, score in enumerate(tier1):
        ans = store.queries.record_answer(
            session_id=f"{version}-{i}", question=f"q{i}", answer_text="a", pipeline_version=version, latency_ms=100
        )
        store.evaluations.add(ans.answer_id, "heuristic", heuristic_score=score)
        if i < len(ratings):
            store.feedback.add(ans.answer_id, rating=ratings[i])


def _switch(store: Store) -> tuple[str, str]:
    old = store.pipelines.register_config(PipelineConfig())
    store.pipelines.activate(old.version_id, reason="start")
    new = store.pipelines.register_config(PipelineConfig().with_overrides(retrieval={"k": 8}))
    _serve(store, old.version_id, [0.4 + 0.01 * (i % 5) for i in range(20)], ["negative"] * 6 + ["positive"] * 2)
    store.pipelines.activate(
        new.version_id,
        reason="measured",
        expected_delta={"metric": "answer_correct", "value": 0.1, "ci95": [0.02, 0.18]},
    )
    _serve(store, new.version_id, [0.7 + 0.01 * (i % 5) for i in range(20)], ["positive"] * 6 + ["negative"] * 2)
    return old.version_id, new.version_id


def test_a_switch_is_measured_once_after_its_window(store: Store) -> None:
    old, new = _switch(store)
    now = datetime.now(UTC)
    assert audit_activations(store, lambda: now + timedelta(hours=1)) == []  # the window has not passed
    [entry] = audit_activations(store, lambda: now + timedelta(days=2))
    activation = next(
        e for e in store.audit.timeline(action_type="pipeline_activate") if e.pipeline_version_after == new
    )
    assert entry.refers_to == activation.log_id and (entry.pipeline_version_before, entry.pipeline_version_after) == (
        old,
        new,
    )
    assert entry.expected_delta == {"metric": "answer_correct", "value": 0.1, "ci95": [0.02, 0.18]}
    actual = entry.actual_delta or {}
    tier1 = actual["metrics"]["tier1_score"]
    assert (tier1["n_before"], tier1["n_after"]) == (20, 20)
    assert tier1["difference"] == pytest.approx(0.3) and actual["value"] == pytest.approx(0.3)
    assert 0.28 < tier1["ci95"][0] < 0.3 < tier1["ci95"][1] < 0.32
    rating = actual["metrics"]["user_rating"]
    assert (rating["n_before"], rating["n_after"], rating["before"], rating["after"]) == (8, 8, 0.25, 0.75)
    assert actual["metrics"]["refusal_rate"]["difference"] == 0.0
    # once per switch; the start (nothing before it) is not a switch
    assert audit_activations(store, lambda: now + timedelta(days=3)) == []
    assert len(store.audit.timeline(action_type=ACTION)) == 1


def test_answers_outside_the_windows_are_not_counted(store: Store) -> None:
    from ragloop.store.models import Answer

    old, new = _switch(store)
    with store.db.transaction() as s:  # 5 of each version's answers served two days away from the switch
        for version, shift in ((old, -2), (new, 2)):
            ids = s.scalars(select(Answer.answer_id).where(Answer.pipeline_version == version).limit(5)).all()
            for row in s.scalars(select(Answer).where(Answer.answer_id.in_(ids))):
                row.created_at = row.created_at + timedelta(days=shift)
    [entry] = audit_activations(store, lambda: datetime.now(UTC) + timedelta(days=4))
    tier1 = (entry.actual_delta or {})["metrics"]["tier1_score"]
    assert (tier1["n_before"], tier1["n_after"]) == (15, 15)


def test_the_measurement_waits_for_tier1_to_score_the_window_then_counts_what_is_late(store: Store) -> None:
    _old, new = _switch(store)
    late = [
        store.queries.record_answer(session_id=f"late-{i}", question="q", answer_text="a", pipeline_version=new)
        for i in range(3)
    ]
    now = datetime.now(UTC)
    assert audit_activations(store, lambda: now + timedelta(days=1, hours=6)) == []  # 3 answers unscored
    store.evaluations.add(late[0].answer_id, "heuristic", heuristic_score=0.7)
    assert audit_activations(store, lambda: now + timedelta(days=1, hours=12)) == []  # still 2
    [entry] = audit_activations(store, lambda: now + timedelta(days=2, hours=1))  # a window later: measured
    actual = entry.actual_delta or {}
    assert actual["unscored"] == [0, 2]
    assert actual["n"] == [20, 21] and actual["metrics"]["refusal_rate"]["n_after"] == 23
    text = delta_text(actual)
    assert text is not None and text.endswith(", [0, 2] not yet scored")


def test_a_fully_scored_switch_is_measured_as_soon_as_its_window_closes(store: Store) -> None:
    _switch(store)
    [entry] = audit_activations(store, lambda: datetime.now(UTC) + timedelta(days=1, minutes=1))
    assert (entry.actual_delta or {})["unscored"] == [0, 0]


def test_a_window_s_interval_counts_sessions_not_turns(store: Store) -> None:
    """The same 20 scores a side, once from 20 one-turn sessions and once from 4 five-turn ones
    whose turns score alike: the difference is the same, the interval far wider in the second."""
    old = store.pipelines.register_config(PipelineConfig())
    store.pipelines.activate(old.version_id, reason="start")
    new = store.pipelines.register_config(PipelineConfig().with_overrides(retrieval={"k": 8}))
    before = [0.3, 0.6, 0.45, 0.5]
    after = [0.5, 0.8, 0.6, 0.75]
    for version, means in ((old.version_id, before), (new.version_id, after)):
        if version == new.version_id:
            store.pipelines.activate(version, reason="measured")
        for g, mean in enumerate(means):
            for turn in range(5):
                ans = store.queries.record_answer(
                    session_id=f"{version}-{g}", question=f"q{g}-{turn}", answer_text="a", pipeline_version=version
                )
                store.evaluations.add(ans.answer_id, "heuristic", heuristic_score=mean)
    [entry] = audit_activations(store, lambda: datetime.now(UTC) + timedelta(days=2))
    tier1 = (entry.actual_delta or {})["metrics"]["tier1_score"]
    assert (tier1["n_before"], tier1["n_after"], tier1["sessions_before"], tier1["sessions_after"]) == (20, 20, 4, 4)
    assert tier1["difference"] == pytest.approx(0.2)
    # as 40 independent turns the interval would be about [0.13, 0.27] and exclude 0; 8 sessions do not
    assert tier1["ci95"][0] < 0.0 < 0.2 < tier1["ci95"][1]


def test_an_experiment_s_primary_difference_is_its_expected_delta() -> None:
    results = {
        "primary_metric": "tier1_score",
        "metrics": {
            "tier1_score": {
                "difference": 0.05,
                "always_valid_ci": {"lo": 0.01, "hi": 0.09},
                "treatment": {"n": 600, "mean": 0.7, "sd": 0.1},
            }
        },
    }
    assert experiment_expectation(results) == {
        "metric": "tier1_score",
        "value": 0.05,
        "ci95": [0.01, 0.09],
        "n": 600,
        "from": "experiment (always-valid interval)",
    }
    assert experiment_expectation({"primary_metric": "tier1_score", "metrics": {}}) is None


def test_cli_lists_switches_with_expected_and_measured_deltas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("RAGLOOP_DATABASE_URL", url)
    monkeypatch.setenv("RAGLOOP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAGLOOP_ACTIVATION_AUDIT_WINDOW_S", "2")
    with Store.open(url) as store:
        old, new = _switch(store)
    listed = CliRunner().invoke(app, ["pipeline", "switches", "--json"])
    assert listed.exit_code == 0, listed.output
    [row] = [r for r in json.loads(listed.output) if r["version_before"] == old]
    assert row["expected_delta"]["value"] == 0.1 and row["actual_delta"] is None  # not measured yet
    time.sleep(2.1)  # the 2-second window passes
    measured = CliRunner().invoke(app, ["pipeline", "switches", "--measure", "--json"])
    [row] = [r for r in json.loads(measured.output) if r["version_after"] == new]
    assert row["actual_delta"]["metric"] == "tier1_score" and row["actual_delta"]["n"] == [20, 20]
    human = CliRunner().invoke(app, ["pipeline", "switches"])
    assert human.exit_code == 0, human.output
    assert "expected answer_correct +0.100 [+0.020, +0.180]" in human.output
    assert "actual   tier1_score +0.300 [+0.291, +0.309] n=[20, 20] in [20, 20] sessions" in human.output


def test_two_workers_record_one_measurement_of_a_switch(store: Store) -> None:
    """`record_once` is the check-and-write the audit runs: racing writers leave one entry."""
    import threading

    change = store.audit.record("pipeline_activate", triggered_by="t", evidence={})
    got: list[object] = []

    def write() -> None:
        got.append(store.audit.record_once(ACTION, refers_to=change.log_id, triggered_by="w", evidence={}))

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(g is not None for g in got) == 1
    assert [e.refers_to for e in store.audit.timeline(action_type=ACTION)] == [change.log_id]
