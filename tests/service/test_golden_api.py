"""The golden set through the API: every route admin-only, versions and diffs, the review queue
(which never shows a score), nomination, coverage and generation; on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from ragloop.store.repositories import GoldenProposal
from tests.service.conftest import build_app, make_keys, running

pytestmark = pytest.mark.anyio
SCORE_WORDS = ("score", "heuristic", "judge", "rating", "evidence", "answer_id")

ROUTES = [
    ("GET", "/v1/golden", None),
    ("POST", "/v1/golden", {"question": "q?", "expected_answer": "a"}),
    ("POST", "/v1/golden/0123/deprecate", None),
    ("POST", "/v1/golden/0123/revise", {"expected_answer": "b"}),
    ("GET", "/v1/golden/versions", None),
    ("GET", "/v1/golden/diff?from_version=0", None),
    ("GET", "/v1/golden/summary", None),
    ("GET", "/v1/golden/review", None),
    ("POST", "/v1/golden/review/0123/approve", {}),
    ("POST", "/v1/golden/review/0123/reject", {}),
    ("POST", "/v1/golden/nominate", None),
    ("GET", "/v1/golden/coverage", None),
    ("POST", "/v1/golden/generate", {}),
]


async def test_every_golden_route_is_admin_only(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        for method, path, body in ROUTES:
            r = await c.request(method, path, json=body, headers=keys.u)
            assert r.status_code == 403, (method, path, r.status_code)
            assert (await c.request(method, path, json=body)).status_code == 401, (method, path)
    assert store.golden.golden_set_version() == 0 and store.golden_candidates.count() == 0


async def test_versions_diff_and_summary(collection: Collection, any_store: Store) -> None:
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        ids = []
        for q, d in (
            ("How long is the bridge?", "easy"),
            ("Who runs the ferry?", "hard"),
            ("Tram colour?", "standard"),
        ):
            r = await c.post(
                "/v1/golden", json={"question": q, "expected_answer": "x", "difficulty": d}, headers=keys.a
            )
            assert r.status_code == 201, r.text
            assert r.json()["source"] == "human" and r.json()["added_in"] == len(ids) + 1
            ids.append(r.json()["entry_id"])
        r = await c.post(f"/v1/golden/{ids[0]}/deprecate", json={"note": "duplicate"}, headers=keys.a)
        assert r.status_code == 200 and r.json()["deprecated_in"] == 4
        assert (await c.post(f"/v1/golden/{ids[0]}/deprecate", headers=keys.a)).status_code == 409
        assert (await c.post(f"/v1/golden/{'f' * 32}/deprecate", headers=keys.a)).status_code == 404

        r = await c.post(f"/v1/golden/{ids[1]}/revise", json={"expected_answer": "the Tide Company"}, headers=keys.a)
        assert r.status_code == 200, r.text
        rev = r.json()
        assert (rev["lineage_id"], rev["version"], rev["added_in"]) == (ids[1], 2, 5) and rev["approved_at"]
        assert (await c.post(f"/v1/golden/{ids[1]}/revise", json={"note": "x"}, headers=keys.a)).status_code == 422
        assert (
            await c.post(f"/v1/golden/{ids[1]}/revise", json={"difficulty": "easy"}, headers=keys.a)
        ).status_code == 409
        changed = (await c.get("/v1/golden/diff?from_version=4&to_version=5", headers=keys.a)).json()["changed"]
        assert [(x["lineage_id"], x["fields"]) for x in changed] == [(ids[1], ["expected_answer"])]

        now = (await c.get("/v1/golden?version=4", headers=keys.a)).json()
        assert now["golden_set_version"] == 4 and now["count"] == 2
        past = (await c.get("/v1/golden?version=3", headers=keys.a)).json()
        assert past["golden_set_version"] == 3 and past["count"] == 3
        assert (await c.get("/v1/golden?version=99", headers=keys.a)).status_code == 404

        versions = (await c.get("/v1/golden/versions", headers=keys.a)).json()
        assert [v["version"] for v in versions["versions"]] == [5, 4, 3, 2, 1]
        assert versions["versions"][1] == versions["versions"][1] | {"kind": "deprecate", "note": "duplicate"}
        assert versions["versions"][0]["kind"] == "revise" and versions["versions"][0]["actor"].startswith("key:")

        diff = (await c.get("/v1/golden/diff?from_version=1&to_version=4", headers=keys.a)).json()
        assert (diff["from_version"], diff["to_version"]) == (1, 4)
        assert [e["question"] for e in diff["added"]] == ["Who runs the ferry?", "Tram colour?"]
        assert [e["question"] for e in diff["deprecated"]] == ["How long is the bridge?"]
        assert (await c.get("/v1/golden/diff?from_version=0&to_version=7", headers=keys.a)).status_code == 404

        summ = (await c.get("/v1/golden/summary?version=3", headers=keys.a)).json()
        assert summ["count"] == 3 and summ["by_source"] == {"human": 3}
        mix = {m["difficulty"]: m for m in summ["mix"]}
        assert mix["easy"]["count"] == 1 and mix["easy"]["n"] == 3 and len(mix["easy"]["ci95"]) == 2
        assert mix["hard"]["target"] == 0.2


async def test_review_queue_hides_scores_and_approval_is_required(collection: Collection, any_store: Store) -> None:
    store = any_store
    keys = make_keys(store)
    a, b = store.golden_candidates.propose(
        [
            GoldenProposal(
                "When was the bridge completed?",
                "In 1887.",
                source="auto_nominated",
                answer_id="a" * 32,
                evidence={"heuristic_score": 0.97, "judge_score": 0.93, "positive_ratings": 4},
            ),
            GoldenProposal("Who runs the ferri?", "", source="adversarial", domain_tags=["adversarial:near_miss"]),
        ]
    )
    async with running(build_app(store)) as c:
        queue = (await c.get("/v1/golden/review", headers=keys.a)).json()
        assert queue["pending"] == 2 and len(queue["candidates"]) == 2
        for cand in queue["candidates"]:
            assert not [k for k in cand if any(w in k for w in SCORE_WORDS)], cand
        text = json.dumps(queue)
        assert "0.97" not in text and "0.93" not in text and "a" * 32 not in text
        assert (await c.get("/v1/golden", headers=keys.a)).json()["count"] == 0  # nothing in unapproved

        r = await c.post(f"/v1/golden/review/{b.candidate_id}/approve", json={}, headers=keys.a)
        assert r.status_code == 422 and "expected answer" in r.text  # an empty proposal needs the reviewer's
        r = await c.post(
            f"/v1/golden/review/{a.candidate_id}/approve",
            json={"expected_answer": "It was completed in 1887.", "note": "checked the source"},
            headers=keys.a,
        )
        assert r.status_code == 200, r.text
        done = r.json()
        assert done["candidate"]["status"] == "approved" and done["candidate"]["answer_edited"] is True
        assert done["entry"]["expected_answer"] == "It was completed in 1887." and done["entry"]["approved_at"]
        assert not [k for k in done["candidate"] if any(w in k for w in SCORE_WORDS)]
        r = await c.post(f"/v1/golden/review/{a.candidate_id}/approve", json={}, headers=keys.a)
        assert r.status_code == 409
        r = await c.post(
            f"/v1/golden/review/{b.candidate_id}/reject", json={"note": "not a real entity"}, headers=keys.a
        )
        assert r.status_code == 200 and r.json()["candidate"]["status"] == "rejected"
        assert (await c.post(f"/v1/golden/review/{'e' * 32}/reject", json={}, headers=keys.a)).status_code == 404
        assert (await c.get("/v1/golden/review", headers=keys.a)).json()["pending"] == 0
        gold = (await c.get("/v1/golden", headers=keys.a)).json()
        assert [e["source"] for e in gold["entries"]] == ["auto_nominated"]
        versions = (await c.get("/v1/golden/versions", headers=keys.a)).json()["versions"]
        assert versions[0]["kind"] == "approve"


async def test_nominate_coverage_and_generate(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        for q in ("When was the Zorblat Bridge completed?", "Who operates the Harbour Ferry?"):
            r = await c.post("/v1/query", json={"question": q, "session_id": "s1"}, headers=keys.u)
            assert r.status_code == 200, r.text
        nom = (await c.post("/v1/golden/nominate", headers=keys.a)).json()
        assert nom["nominated"] == 0 and nom["considered"] == 0  # nobody rated anything yet

        cov = await c.get("/v1/golden/coverage?radius=0.9", headers=keys.a)
        assert cov.status_code == 200, cov.text
        body = cov.json()
        assert body["n"] == 2 and body["covered"] == 0 and body["coverage"] == 0.0 and body["ci95"][0] == 0.0
        assert len(body["uncovered_clusters"]) == 2 and body["embedder"]
        assert (await c.get("/v1/golden/coverage?collection=nope", headers=keys.a)).status_code == 409

        r = await c.post("/v1/golden/generate", json={"max_candidates": 6, "radius": 0.9}, headers=keys.a)
        assert r.status_code == 200, r.text
        gen = r.json()
        assert (
            gen["generator"] == "templates" and 0 < gen["proposed"] <= 6 and len(gen["candidates"]) == gen["proposed"]
        )
        assert {c["source"] for c in gen["candidates"]} == {"adversarial"}
        r = await c.post("/v1/golden/generate", json={"generator": "chat"}, headers=keys.a)
        assert r.status_code == 409 and "chat model" in r.text
        queue = (await c.get("/v1/golden/review", headers=keys.a)).json()
        assert queue["pending"] == gen["proposed"]


def test_nightly_nomination_is_a_periodic_task_when_enabled(store: Store) -> None:
    from tests.service.conftest import SERVICE

    app = build_app(store, service_config=SERVICE.with_(golden_nomination_check_s=600.0))
    assert "golden-nomination" in app.state.service.loops.names
    assert "golden-nomination" not in build_app(store).state.service.loops.names  # off by default
    with pytest.raises(ValueError, match="sum to 1"):
        build_app(store, service_config=SERVICE.with_(golden_target_mix="easy=0.9,standard=0.9,hard=0"))
