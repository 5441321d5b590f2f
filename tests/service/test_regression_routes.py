"""`GET /v1/regression/runs` (admin; the report data) and the scheduled regression inside the
service: off by default, on by `RAGLOOP_REGRESSION_INTERVAL_S`, due by the loop's clock."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ragloop.experiments.golden import import_jsonl
from ragloop.experiments.regression import Answered, regression_due, run_regression
from ragloop.improve.clock import ManualClock
from ragloop.service.config import ServiceConfig
from ragloop.store import Store
from tests.experiments.test_lifecycle import _base, _golden
from tests.service.conftest import build_app, make_keys, running

pytestmark = pytest.mark.anyio


def _answer(q: str) -> Answered:
    i = q.split()[-1].rstrip("?")
    return Answered(f"item {i} is red", [f"d{i}.md"], False)


async def test_runs_route_is_admin_only_and_carries_n_and_ci(store: Store, tmp_path: Path) -> None:
    version = _base(store)
    import_jsonl(store, _golden(tmp_path), created_by="t")
    run = run_regression(store, _answer, pipeline_version=version)
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        assert (await c.get("/v1/regression/runs")).status_code == 401
        assert (await c.get("/v1/regression/runs", headers=keys.u)).status_code == 403
        r = await c.get("/v1/regression/runs", headers=keys.a, params={"limit": 5})
        assert r.status_code == 200
        body = r.json()
        assert body["threshold"] == 0.02 and body["runs"][0]["run_id"] == run.run_id
        assert body["runs"][0]["metrics"]["doc_recall"] == {
            "metric": "doc_recall",
            "n": run.entries,
            "mean": 1.0,
            "ci95": [1.0, 1.0],
        }
        one = await c.get(f"/v1/regression/runs/{run.run_id}", headers=keys.a)
        assert one.status_code == 200 and len(one.json()["items"]) == run.entries
        assert (await c.get("/v1/regression/runs/nope", headers=keys.a)).status_code == 404
        assert (await c.get("/v1/regression/runs", headers=keys.a, params={"limit": 0})).status_code == 422


def test_scheduler_off_by_default_on_by_setting() -> None:
    assert ServiceConfig().regression_interval_s == 0.0
    assert ServiceConfig.from_env({"RAGLOOP_REGRESSION_INTERVAL_S": "86400"}).regression_interval_s == 86400.0


async def test_service_schedules_the_regression_only_when_set(store: Store) -> None:
    off = build_app(store)
    assert "golden-regression" not in off.state.service.loops.names
    on = build_app(store, service_config=ServiceConfig(regression_interval_s=86400.0, inprocess_worker=False))
    assert "golden-regression" in on.state.service.loops.names


def test_nightly_is_read_on_the_loops_clock(store: Store, tmp_path: Path) -> None:
    version = _base(store)
    import_jsonl(store, _golden(tmp_path, n=6), created_by="t")
    clock = ManualClock()
    assert regression_due(store, clock.now(), 86400)  # never run
    run = run_regression(store, _answer, pipeline_version=version, clock=clock)
    row = store.regressions.get(run.run_id)
    assert row is not None and row.started_at == clock.now()
    clock.advance(days=0.5)
    assert not regression_due(store, clock.now(), 86400)
    clock.advance(seconds=timedelta(hours=12).total_seconds())
    assert regression_due(store, clock.now(), 86400)


async def test_evaluator_drift_route_is_admin_only(store: Store) -> None:
    from datetime import UTC, datetime

    from ragloop.experiments.drift import rubric_check

    rubric_check(store, datetime(2026, 3, 1, tzinfo=UTC))
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        assert (await c.get("/v1/evaluator/drift", headers=keys.u)).status_code == 403
        r = await c.get("/v1/evaluator/drift", headers=keys.a)
        assert r.status_code == 200
        body = r.json()
        assert body["accepted_judge"] is None and body["rubric"]["status"] == "insufficient"
        assert body["rubric_flagged"] is False


async def test_rubric_check_is_scheduled_monthly_by_default(store: Store) -> None:
    assert ServiceConfig().rubric_check_interval_s == 30 * 86400.0
    assert "rubric-check" in build_app(store).state.service.loops.names
    off = build_app(store, service_config=ServiceConfig(rubric_check_interval_s=0.0, inprocess_worker=False))
    assert "rubric-check" not in off.state.service.loops.names
