"""Experiments, candidates and the golden set through the API: admin only, invalid specs refused with
the reason, arms served and recorded by session, results in the design's shape."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from ragloop.experiments import ExperimentStatus, hashed_variant
from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from ragloop.store.models import Query
from tests.service.conftest import CFG, build_app, make_keys, running

pytestmark = pytest.mark.anyio
Q = "When was the Zorblat Bridge completed?"
BODY = {
    "name": "k4_vs_k3",
    "control": {"retrieval": {"k": 4}},
    "treatment": {"retrieval": {"k": 3}},
    "traffic_split": 0.5,
    "min_sample_size": 500,
    "primary_metric": "context_recall",
    "guardrail_metrics": ["faithfulness", "latency_p99"],
}


async def test_experiment_lifecycle_over_the_api(collection: Collection, any_store: Store) -> None:
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        assert (await c.post("/v1/experiments", json=BODY, headers=keys.u)).status_code == 403
        assert (await c.post("/v1/experiments", json=BODY)).status_code == 401
        for bad, needle in (
            (dict(BODY, treatment=BODY["control"]), "control = treatment"),
            (dict(BODY, traffic_split=0.9), "traffic_split"),
            (dict(BODY, traffic_split=0.0), "traffic_split"),
            (dict(BODY, primary_metric="no_such_metric"), "unknown metric"),
            (dict(BODY, guardrail_metrics=["nope"]), "unknown metric"),
            (dict(BODY, treatment={"retrieval": {"modee": "bm25"}}), "unknown config key"),
        ):
            r = await c.post("/v1/experiments", json=bad, headers=keys.a)
            assert r.status_code == 422, (bad, r.text)
            assert needle in r.text, r.text
        r = await c.post("/v1/experiments", json=BODY, headers=keys.a)
        assert r.status_code == 201, r.text
        exp = r.json()
        eid = exp["experiment_id"]
        assert exp["status"] == "running" and exp["control_version"] != exp["treatment_version"]
        assert (await c.post("/v1/experiments", json=dict(BODY, name="second"), headers=keys.a)).status_code == 409
        served = {}
        for i in range(8):
            r = await c.post("/v1/query", json={"question": Q, "session_id": f"s{i}"}, headers=keys.u)
            assert r.status_code == 200, r.text
            served[f"s{i}"] = r.json()["pipeline_version"]
        # each session got its hashed arm (the stored session id is "<key id>:<session>"), and the
        # stored query says which
        variants = {}
        with store.db.transaction(write=False) as s:
            rows = s.execute(select(Query.session_id, Query.variant, Query.experiment_id, Query.pipeline_version)).all()
        assert len(rows) == 8
        for session, variant, experiment, version in rows:
            assert experiment == eid
            expected = hashed_variant(eid, session, 0.5).value
            assert variant == expected
            variants[session] = variant
            assert version == (exp["treatment_version"] if variant == "treatment" else exp["control_version"])
        assert set(served.values()) <= {exp["control_version"], exp["treatment_version"]}
        res = (await c.get(f"/v1/experiments/{eid}/results", headers=keys.a)).json()
        assert res["status"] == "running" and res["recommendation"] == "continue"
        assert res["samples"]["control"] + res["samples"]["treatment"] == 8
        assert set(res["metrics"]) == {"context_recall", "faithfulness", "latency_p99"}
        assert "always_valid" in res["p_value"] and "welch" in res["p_value"] and res["auto_promote_at"]
        lst = (await c.get("/v1/experiments", headers=keys.a)).json()
        assert [e["experiment_id"] for e in lst] == [eid]
        # stop: everyone is back on the current version, the stored query has no experiment
        r = await c.post(f"/v1/experiments/{eid}/stop", json={"reason": "test"}, headers=keys.a)
        assert r.status_code == 200 and r.json()["status"] == ExperimentStatus.STOPPED
        r = await c.post("/v1/query", json={"question": Q, "session_id": "after"}, headers=keys.u)
        assert r.json()["pipeline_version"] == CFG.version_id
        assert (await c.post(f"/v1/experiments/{eid}/reject", headers=keys.a)).status_code == 409
        assert [a.action_type for a in store.audit.timeline(action_type="experiment_stopped")]


async def test_candidates_versions_and_diff(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        body = {"overrides": {"retrieval": {"mode": "bm25"}}, "description": "lexical only"}
        assert (await c.post("/v1/pipeline/candidates", json=body, headers=keys.u)).status_code == 403
        r = await c.post("/v1/pipeline/candidates", json=body, headers=keys.a)
        assert r.status_code == 201, r.text
        cand = r.json()
        assert cand["status"] == "candidate" and cand["parent_version"] == CFG.version_id
        bad = {"overrides": {"retrieval": {"nope": 1}}}
        r = await c.post("/v1/pipeline/candidates", json=bad, headers=keys.a)
        assert r.status_code == 422 and "unknown config key" in r.text
        assert (await c.post("/v1/pipeline/candidates", json={}, headers=keys.a)).status_code == 422
        r = await c.get(f"/v1/pipeline/versions/{CFG.version_id}/diff/{cand['version']}", headers=keys.a)
        assert r.status_code == 200
        assert r.json()["changes"] == [{"path": "retrieval.mode", "before": "hybrid", "after": "bm25"}]
        versions = (await c.get("/v1/pipeline/versions", headers=keys.a)).json()
        assert {v["version"] for v in versions} == {CFG.version_id, cand["version"]}
        # the current pointer did not move
        assert (await c.get("/v1/pipeline/current", headers=keys.u)).json()["version"] == CFG.version_id


async def test_golden_routes(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        entry = {"question": "How long is the bridge?", "expected_answer": "300 m", "required_doc_ids": ["bridge.md"]}
        assert (await c.post("/v1/golden", json=entry, headers=keys.u)).status_code == 403
        r = await c.post("/v1/golden", json=entry, headers=keys.a)
        assert r.status_code == 201, r.text
        eid = r.json()["entry_id"]
        listed = (await c.get("/v1/golden", headers=keys.a)).json()
        assert listed["count"] == 1 and listed["entries"][0]["required_doc_ids"] == ["bridge.md"]
        assert (await c.post(f"/v1/golden/{eid}/deprecate", headers=keys.a)).status_code == 200
        assert (await c.post(f"/v1/golden/{eid}/deprecate", headers=keys.a)).status_code == 409
        assert (await c.get("/v1/golden", headers=keys.a)).json()["count"] == 0


async def test_switches_route_shows_expected_and_measured_deltas(collection: Collection, store: Store) -> None:
    from datetime import UTC, datetime, timedelta

    from ragloop.experiments.activation_audit import audit_activations
    from tests.experiments.test_activation_audit import _switch

    old, new = _switch(store)
    audit_activations(store, lambda: datetime.now(UTC) + timedelta(days=2))
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        assert (await c.get("/v1/pipeline/switches", headers=keys.u)).status_code == 403
        r = await c.get("/v1/pipeline/switches", headers=keys.a)
        assert r.status_code == 200, r.text
        [row] = [s for s in r.json() if s["version_before"] == old]
        assert row["version_after"] == new and row["expected_delta"]["value"] == 0.1
        assert row["actual_delta"]["metric"] == "tier1_score" and row["actual_delta"]["n"] == [20, 20]
