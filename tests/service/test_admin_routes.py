"""The admin console's read routes: the audit log paged and filtered, evaluations
filtered by tier, failure mode, score and experiment, the tiers' agreement with n and intervals, an
experiment's confidence sequence; all admin-only (a user key gets 403)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from ragloop.store.models import Answer, Query
from ragloop.store.vocabulary import Tier
from tests.service.conftest import CFG, build_app, make_keys, running

pytestmark = pytest.mark.anyio
QUESTIONS = (
    "When was the Zorblat Bridge completed?",
    "Who designed the Quill Tower?",
    "How tall is the Quill Tower?",
)
ROUTES = (
    "/v1/admin/audit",
    "/v1/admin/evaluations",
    "/v1/admin/evaluations/agreement",
    f"/v1/admin/experiments/{'0' * 32}/sequence",
)


async def _ask(c: Any, headers: dict[str, str], question: str, session: str) -> str:
    r = await c.post("/v1/query", json={"question": question, "session_id": session}, headers=headers)
    assert r.status_code == 200, r.text
    return str(r.json()["answer_id"])


def _scores(f: float, ar: float, cp: float) -> dict[str, float | None]:
    return {"faithfulness": f, "answer_relevance": ar, "context_precision": cp}


async def test_admin_routes_refuse_user_keys(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        for path in ROUTES:
            assert (await c.get(path)).status_code == 401, path
            assert (await c.get(path, headers=keys.u)).status_code == 403, path
        assert (await c.get(ROUTES[0], headers=keys.a)).status_code == 200
        schema = (await c.get("/openapi.json")).json()
        assert set(ROUTES[:3]) <= set(schema["paths"])
        assert "/v1/admin/experiments/{experiment_id}/sequence" in schema["paths"]


async def test_evaluations_filters_and_agreement(collection: Collection, any_store: Store) -> None:
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        a1, a2, a3 = [await _ask(c, keys.u, q, f"e{i}") for i, q in enumerate(QUESTIONS)]
        ev = store.evaluations
        ev.add(a1, Tier.HEURISTIC, heuristic_score=0.9)
        ev.add(a1, Tier.LLM_JUDGE, scores=_scores(0.8, 0.9, 0.7))
        ev.add(a1, Tier.HUMAN, scores=_scores(1.0, 1.0, 1.0))
        ev.add(a2, Tier.HEURISTIC, heuristic_score=0.2)
        ev.add(a2, Tier.LLM_JUDGE, scores=_scores(0.9, 0.9, 0.9))
        ev.add(a2, Tier.HUMAN, scores=_scores(0.1, 0.3, 0.2), failure_mode="generation_failure")
        ev.add(a3, Tier.HEURISTIC, heuristic_score=0.6)

        async def listed(query: str) -> dict[str, Any]:
            r = await c.get(f"/v1/admin/evaluations{query}", headers=keys.a)
            assert r.status_code == 200, r.text
            return dict(r.json())

        everything = await listed("")
        assert everything["total"] == 7 and len(everything["evaluations"]) == 7
        row = everything["evaluations"][0]  # newest first: a3's tier-1 score
        assert (row["answer_id"], row["evaluation_tier"], row["overall"]) == (a3, "heuristic", 0.6)
        assert row["question"] == QUESTIONS[2] and row["answer"] and row["pipeline_version"] == CFG.version_id
        humans = await listed("?tier=human")
        assert {r["answer_id"] for r in humans["evaluations"]} == {a1, a2} and humans["total"] == 2
        judged = {r["answer_id"]: r["overall"] for r in (await listed("?tier=llm_judge"))["evaluations"]}
        assert judged[a1] == pytest.approx(0.8) and judged[a2] == pytest.approx(0.9)
        failed = await listed("?failure_mode=generation_failure")
        assert [(r["answer_id"], r["evaluation_tier"]) for r in failed["evaluations"]] == [(a2, "human")]
        high = await listed("?min_score=0.85")
        assert sorted((r["answer_id"], r["evaluation_tier"]) for r in high["evaluations"]) == sorted(
            [(a1, "heuristic"), (a1, "human"), (a2, "llm_judge")]
        )
        low = await listed("?max_score=0.25&tier=heuristic")
        assert [r["answer_id"] for r in low["evaluations"]] == [a2]
        page = await listed("?limit=3&offset=3")
        assert page["total"] == 7 and len(page["evaluations"]) == 3
        assert (await c.get("/v1/admin/evaluations?min_score=0.9&max_score=0.1", headers=keys.a)).status_code == 422
        assert (await c.get("/v1/admin/evaluations?tier=robot", headers=keys.a)).status_code == 422
        assert (await listed(f"?experiment_id={'0' * 32}"))["total"] == 0

        r = await c.get("/v1/admin/evaluations/agreement", headers=keys.a)
        assert r.status_code == 200, r.text
        agreement = r.json()
        assert agreement["answers"] == 2 and agreement["threshold"] == 0.5
        pairs = {(p["a"], p["b"]): p for p in agreement["pairs"]}
        t1_t2 = pairs[("heuristic", "llm_judge")]
        # a1 passes both; a2 fails tier 1 and passes the judge: one of two agree
        assert t1_t2["n"] == 2 and t1_t2["agreement"]["value"] == 0.5
        assert t1_t2["agreement"]["lo"] < 0.5 < t1_t2["agreement"]["hi"]
        assert t1_t2["mean_abs_difference"]["value"] == pytest.approx((0.1 + 0.7) / 2, abs=1e-6)
        assert pairs[("heuristic", "human")]["agreement"]["value"] == 1.0
        assert t1_t2["kappa"]["n"] == 2 and t1_t2["kappa"]["value"] == 0.0  # agree only as often as chance
        t2_h = pairs[("llm_judge", "human")]
        assert t2_h["agreement"] == {"value": 0.5, "lo": t2_h["agreement"]["lo"], "hi": t2_h["agreement"]["hi"], "n": 2}


async def test_audit_log_pages(collection: Collection, any_store: Store) -> None:
    store = any_store
    keys = make_keys(store)
    action = store.improvement_actions.propose("expansion_cache", "expansion_cache:default", "k").action
    for i in range(5):
        store.audit.record(
            "remediation:expansion_cache" if i % 2 else "rollback",
            triggered_by=f"test {i}",
            evidence={"action_id": action.action_id, "i": i} if i % 2 else {"i": i},
            expected_delta={"recall_at_k": 0.05} if i % 2 else None,
            actual_delta={"difference": 0.01, "lo": -0.01, "hi": 0.03} if i == 3 else None,
        )
    async with running(build_app(store)) as c:
        mine = "action_type=rollback&action_type=remediation:expansion_cache"
        r = await c.get(f"/v1/admin/audit?limit=2&{mine}", headers=keys.a)
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["total"] == 5 and len(page["entries"]) == 2 and page["limit"] == 2
        # the app's start-up wrote its own entry (the active version): the counts cover the whole log
        assert page["action_types"]["rollback"] == 3 and page["action_types"]["remediation:expansion_cache"] == 2
        everything = (await c.get("/v1/admin/audit", headers=keys.a)).json()
        assert everything["total"] == sum(everything["action_types"].values()) > 5
        assert [e["evidence"]["i"] for e in page["entries"]] == [4, 3]
        newest_change = page["entries"][1]
        assert newest_change["action_id"] == action.action_id and newest_change["action_status"] == "proposed"
        assert newest_change["revertible"] is False and newest_change["actual_delta"]["difference"] == 0.01
        rest = (await c.get(f"/v1/admin/audit?limit=2&offset=4&{mine}", headers=keys.a)).json()
        assert [e["evidence"]["i"] for e in rest["entries"]] == [0]
        only = (await c.get("/v1/admin/audit?action_type=remediation:expansion_cache", headers=keys.a)).json()
        assert only["total"] == 2 and {e["action_type"] for e in only["entries"]} == {"remediation:expansion_cache"}
        assert (await c.get("/v1/admin/audit?action_type=a%20b", headers=keys.a)).status_code == 422


async def test_experiment_confidence_sequence(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    body = {
        "name": "k4_vs_k3",
        "control": {"retrieval": {"k": 4}},
        "treatment": {"retrieval": {"k": 3}},
        "traffic_split": 0.5,
        "min_sample_size": 10,
        "primary_metric": "refusal_rate",
        "guardrail_metrics": ["latency_p99"],
    }
    async with running(build_app(store)) as c:
        r = await c.post("/v1/experiments", json=body, headers=keys.a)
        assert r.status_code == 201, r.text
        eid = r.json()["experiment_id"]
        empty = (await c.get(f"/v1/admin/experiments/{eid}/sequence", headers=keys.a)).json()
        assert empty["metric"] == "refusal_rate" and empty["points"] == [] and empty["direction"] == "lower_is_better"
        for i in range(16):
            await _ask(c, keys.u, QUESTIONS[i % 3], f"x{i}")
        r = await c.get(f"/v1/admin/experiments/{eid}/sequence?metric=latency_p99&points=5", headers=keys.a)
        assert r.status_code == 200, r.text
        seq = r.json()
        assert seq["metric"] == "latency_p99" and seq["min_effect"] == 0.02 and seq["burn_in"] == 2
        points = seq["points"]
        assert 1 <= len(points) <= 5
        ns = [p["n_control"] + p["n_treatment"] for p in points]
        assert ns == sorted(ns) and ns[-1] == 16 and min(points[0]["n_control"], points[0]["n_treatment"]) >= 2
        last = points[-1]
        assert last["burned_in"] and last["always_valid_lo"] <= last["difference"] <= last["always_valid_hi"]
        # the always-valid interval is wider than Welch's fixed-sample one
        assert last["always_valid_hi"] - last["always_valid_lo"] > last["welch_hi"] - last["welch_lo"]
        # a user's rating counts from when it was given
        with store.db.transaction(write=False) as s:
            served = select(Answer.answer_id).join(Query, Query.query_id == Answer.query_id)
            answer_ids = list(s.scalars(served.where(Query.experiment_id == eid)))
        for i, aid in enumerate(answer_ids):
            body = {"rating": "positive" if i % 3 else "negative"}
            assert (await c.post(f"/v1/answers/{aid}/feedback", json=body, headers=keys.u)).status_code == 201
        r = await c.get(f"/v1/admin/experiments/{eid}/sequence?metric=user_rating", headers=keys.a)
        assert r.status_code == 200, r.text
        ratings = r.json()
        assert ratings["metric"] == "user_rating" and ratings["direction"] == "higher_is_better"
        assert sum(ratings["points"][-1][k] for k in ("n_control", "n_treatment")) == len(answer_ids) == 16
        bad = await c.get(f"/v1/admin/experiments/{eid}/sequence?metric=nope", headers=keys.a)
        assert bad.status_code == 422 and "unknown metric" in bad.text
        missing = await c.get(f"/v1/admin/experiments/{'0' * 32}/sequence", headers=keys.a)
        assert missing.status_code == 404
