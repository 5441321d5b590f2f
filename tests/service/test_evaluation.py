"""Durable tiered evaluation: exactly one tier-1 evaluation per answer, routing to tier 2 and tier 3,
judge failures retried then recorded, dead letters swept, human review, graceful degradation."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from ragloop.config import PipelineConfig
from ragloop.improve.judge import Judge, JudgeInput, JudgeResult, ScorerJudge
from ragloop.improve.routing import RoutingConfig
from ragloop.models.errors import ModelError
from ragloop.models.scoring import make_scorer
from ragloop.retrieval.collection import Collection
from ragloop.service.config import ServiceConfig
from ragloop.service.pipelines import default_agent_factory
from ragloop.service.worker import EvaluationWorker
from ragloop.store import Store, utcnow
from tests.service.conftest import CFG, SERVICE, build_app, make_keys, running, worker_for

pytestmark = pytest.mark.anyio

QUESTIONS = [
    "When was the Zorblat Bridge completed?",
    "How tall is the Quill Tower?",
    "When did the ferry service end?",
    "How many lines did the Ostria tram network open with?",
    "Who designed the Quill Tower?",
    "What is the capital of Peru?",
]


class BrokenJudge(Judge):
    name = "test:broken"

    def __init__(self) -> None:
        self.calls = 0

    async def evaluate(self, item: JudgeInput) -> JudgeResult:
        self.calls += 1
        raise ModelError("judge backend is down")


class ContentJudge(Judge):
    """A judge that likes every answer (a negative rating it disagrees with goes to a person)."""

    name = "test:content"

    async def evaluate(self, item: JudgeInput) -> JudgeResult:
        return JudgeResult({"faithfulness": 0.9, "answer_relevance": 0.9, "context_precision": 0.9})


async def ask_all(c: Any, headers: dict[str, str], questions: list[str], session: str = "e") -> list[str]:
    ids = []
    for i, q in enumerate(questions):
        r = await c.post("/v1/query", json={"question": q, "session_id": f"{session}{i}"}, headers=headers)
        assert r.status_code == 200, r.text
        ids.append(r.json()["answer_id"])
    return ids


async def drain_until(store: Store, worker: EvaluationWorker, done: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await worker.run(drain=True)
        if done():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the queue did not reach the expected state")


def tiers_of(store: Store, answer_id: str) -> list[tuple[str, str]]:
    return [(e.evaluation_tier, e.status) for e in store.evaluations.for_answer(answer_id)]


async def test_every_answer_gets_exactly_one_tier1_evaluation(collection: Collection, any_store: Store) -> None:
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        ids = await ask_all(c, keys.u, QUESTIONS * 2)
    # two workers race for the same queue
    w1, w2 = worker_for(store), worker_for(store)
    await asyncio.gather(w1.run(drain=True), w2.run(drain=True))
    for answer_id in ids:
        tier1 = [t for t in tiers_of(store, answer_id) if t[0] == "heuristic"]
        assert tier1 == [("heuristic", "completed")], answer_id
    jobs = [j for a in ids for j in store.queue.for_answer(a) if j.tier == "heuristic"]
    assert len(jobs) == len(ids) and all(j.status == "done" and j.attempts == 1 for j in jobs)
    assert w1.processed + w2.processed >= len(ids)


async def test_embedded_worker_evaluates_in_the_background(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    app = build_app(store, worker=True, judge=ScorerJudge(make_scorer("lexical")))
    async with running(app) as c:
        ids = await ask_all(c, keys.u, QUESTIONS[:3])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            evs = [(await c.get(f"/v1/evaluations/{a}", headers=keys.u)).json() for a in ids]
            if all(e["heuristic_score"] is not None for e in evs):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the embedded worker did not evaluate the answers")
        metrics = (await c.get("/metrics", headers=keys.a)).text
        assert 'ragloop_evaluations_total{status="completed",tier="heuristic"}' in metrics


async def test_a_long_remediation_pass_does_not_hold_the_queue(collection: Collection, store: Store) -> None:
    """A pass can fit a collection-wide chunk size for minutes: the queue is worked while it runs,
    and a drained worker has finished it."""
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        ids = await ask_all(c, keys.u, QUESTIONS[:3])
    release, evaluated_meanwhile = threading.Event(), []

    def evaluated() -> int:
        return sum(("heuristic", "completed") in tiers_of(store, a) for a in ids)

    def slow_pass() -> None:
        release.wait(5)
        evaluated_meanwhile.append(evaluated())

    async def release_when_evaluated() -> None:
        deadline = time.monotonic() + 20
        while evaluated() < len(ids) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        release.set()

    releaser = asyncio.create_task(release_when_evaluated())
    judge = ScorerJudge(make_scorer("lexical"))
    worker = EvaluationWorker(store, SERVICE, judge=judge, support_scorer=make_scorer("lexical"), remediation=slow_pass)
    await worker.run(drain=True)
    assert evaluated_meanwhile == [len(ids)]
    await releaser


async def test_judge_failures_are_retried_then_recorded(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        [answer_id] = await ask_all(c, keys.u, QUESTIONS[:1])
        r = await c.post(f"/v1/answers/{answer_id}/feedback", json={"rating": "negative"}, headers=keys.u)
        assert r.json()["improvement_queued"]
        judge = BrokenJudge()
        worker = worker_for(store, judge=judge)

        def dead() -> bool:
            return any(j.tier == "llm_judge" and j.status == "dead" for j in store.queue.for_answer(answer_id))

        await drain_until(store, worker, dead)
        assert judge.calls == 3  # max_attempts of the test queue
        ev = (await c.get(f"/v1/evaluations/{answer_id}", headers=keys.u)).json()
        failed = [e for e in ev["evaluations"] if e["evaluation_tier"] == "llm_judge"]
        assert len(failed) == 1 and failed[0]["status"] == "failed"
        assert "judge backend is down" in failed[0]["error"] and "3 attempt" in failed[0]["error"]
        job = next(j for j in ev["jobs"] if j["tier"] == "llm_judge")
        assert job["status"] == "dead" and "failed 3 of 3 attempts" in job["dead_reason"]
        assert ev["evaluation_tier"] == "heuristic"  # the failed judge is not passed off as a judgement


async def test_lease_expired_on_the_last_attempt_is_swept_into_a_failed_evaluation(
    collection: Collection, store: Store
) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        [answer_id] = await ask_all(c, keys.u, QUESTIONS[:1])
    payload = store.queue.for_answer(answer_id)[0].payload
    store.queue.enqueue(answer_id, "llm_judge", payload, max_attempts=1)
    # a worker claims the tier-2 job and dies holding it
    assert store.queue.claim("crashed", 0.05, tiers=["llm_judge"]) is not None
    await asyncio.sleep(0.1)
    worker = worker_for(store)
    await worker.run(drain=True)  # claiming buries the expired last attempt as a dead letter
    assert worker.evaluator.sweep_dead_letters() == 1
    assert worker.evaluator.sweep_dead_letters() == 0  # idempotent
    assert ("llm_judge", "failed") in tiers_of(store, answer_id)
    assert tiers_of(store, answer_id).count(("heuristic", "completed")) == 1


async def test_routing_golden_low_score_and_human_review(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    store.golden.add_golden_entry(
        QUESTIONS[0], "It was completed in 1887.", source="human", created_by="test", approved_at=None
    )
    async with running(build_app(store)) as c:
        ids = await ask_all(c, keys.u, QUESTIONS[:2])
        # a strict threshold sends everything to tier 2; every disagreement is a review candidate (no
        # floor: each waits for the day's ranked selection)
        worker = worker_for(
            store,
            tier2_threshold=1.01,
            tier3_disagreement=-1.0,
            tier3_disagreement_share=1.0,
            tier3_disagreement_daily_min=0,
        )

        def judged() -> bool:
            return all(("llm_judge", "completed") in tiers_of(store, a) for a in ids)

        await drain_until(store, worker, judged)
        golden_job = next(j for j in store.queue.for_answer(ids[0]) if j.tier == "llm_judge")
        assert "golden_set" in golden_job.payload["reasons"] and golden_job.payload["reference"]
        ev = store.evaluations.latest(ids[0], "llm_judge")
        assert ev is not None and ev.context_recall is not None  # the reference made recall measurable
        pin = worker.evaluator.judge.pin  # type: ignore[union-attr]
        assert (ev.evaluator_model, ev.evaluator_version, ev.evaluator_prompt_sha) == (
            pin.model,
            pin.version,
            pin.prompt_sha,
        )  # the judge is pinned with every tier-2 score
        other = next(j for j in store.queue.for_answer(ids[1]) if j.tier == "llm_judge")
        assert other.payload["reasons"] == ["low_heuristic_score"]
        assert (await c.get("/v1/review", headers=keys.a)).json() == []  # held until the day is over
        [day] = worker.evaluator.intake.select_due(now=utcnow() + timedelta(days=2))  # any time after the day's grace
        assert sorted(day.admitted) == sorted(ids)

        queue = (await c.get("/v1/review", headers=keys.a)).json()
        assert {i["answer_id"] for i in queue} == set(ids)
        assert all(i["reasons"] == ["tier1_tier2_disagreement"] for i in queue)
        assert {e["evaluation_tier"] for e in queue[0]["evaluations"]} == {"heuristic", "llm_judge"}
        review = {"scores": {"faithfulness": 1.0, "answer_relevance": 0.5}, "failure_mode": "ranking_failure"}
        r = await c.post(f"/v1/review/{ids[0]}", json={**review, "labels": ["ok"]}, headers=keys.a)
        assert r.status_code == 201 and r.json()["evaluation_tier"] == "human"
        assert [i["answer_id"] for i in (await c.get("/v1/review", headers=keys.a)).json()] == [ids[1]]
        ev = (await c.get(f"/v1/evaluations/{ids[0]}", headers=keys.u)).json()
        assert ev["evaluation_tier"] == "human" and ev["failure_mode"] == "ranking_failure"
        assert ev["scores"]["faithfulness"] == 1.0
        assert "diagnosis" not in {j.tier for j in store.queue.for_answer(ids[0])}  # no correction, no diagnosis
        # a reviewer's correction is an ideal answer: the answer is diagnosed against it
        r = await c.post(f"/v1/review/{ids[1]}", json={**review, "corrected_answer": "In 1887."}, headers=keys.a)
        assert r.status_code == 201
        [job] = [j for j in store.queue.for_answer(ids[1]) if j.tier == "diagnosis"]
        assert job.payload["reasons"] == ["review_correction"]


async def test_detailed_feedback_goes_to_human_review(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        [answer_id] = await ask_all(c, keys.u, QUESTIONS[:1])
        body = {
            "rating": "negative",
            "corrected_answer": "It opened in 1887.",
            "highlighted_passages": [{"text": "engineer", "note": "wrong"}],
        }
        r = await c.post(f"/v1/answers/{answer_id}/feedback", json=body, headers=keys.u)
        assert r.status_code == 201 and r.json()["weight"] == 4.0
        tiers = {j.tier: j.payload.get("reasons") for j in store.queue.for_answer(answer_id)}
        assert tiers["human"] == ["detailed_feedback"] and tiers["llm_judge"] == ["negative_feedback"]


async def test_queries_are_served_with_the_worker_and_judge_down(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    # no evaluation worker at all: answers are served and their jobs wait, none lost
    async with running(build_app(store, worker=False)) as c:
        ids = await ask_all(c, keys.u, QUESTIONS[:3])
        for a in ids:
            r = await c.post(f"/v1/answers/{a}/feedback", json={"rating": "negative"}, headers=keys.u)
            assert r.status_code == 201
    stats = store.queue.stats()
    queued = {tier: counts["queued"] for tier, counts in stats.by_tier.items()}
    assert queued == {"heuristic": 3, "llm_judge": 3, "diagnosis": 3} and stats.counts["dead"] == 0
    # the worker back, the judge down: answers still served; tier 1 completes, tier 2 retries then records failures
    judge = BrokenJudge()
    async with running(build_app(store, worker=True, judge=judge)) as c:
        more = await ask_all(c, keys.u, QUESTIONS[3:], session="later")
        assert len(more) == 3
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            counts = store.queue.stats().by_tier
            if counts.get("heuristic", {}).get("done") == 6 and counts.get("llm_judge", {}).get("dead", 0) >= 3:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"evaluation did not settle: {store.queue.stats()}")
    for a in ids:
        assert sorted(tiers_of(store, a)) == [("heuristic", "completed"), ("llm_judge", "failed")]
    assert judge.calls >= 9  # three attempts for each of the three negative-feedback jobs


async def test_a_broken_pipeline_falls_back_to_the_last_good_one(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    broken = CFG.with_overrides(retrieval={"k": 3}, name="broken")

    def factory(coll: Collection, config: PipelineConfig) -> Any:
        if config.version_id == broken.version_id:
            raise ModelError("the configured chat model is not installed")
        return default_agent_factory(coll, config)

    async with running(build_app(store, agent_factory=factory)) as c:
        q = {"question": QUESTIONS[0], "session_id": "fb"}
        good = (await c.post("/v1/query", json=q, headers=keys.u)).json()
        assert good["degraded"] is False
        store.pipelines.register_config(broken)
        store.pipelines.activate(broken.version_id, reason="test")
        c._transport.app.state.service.agents.invalidate()
        r = await c.post("/v1/query", json=q, headers=keys.u)
        assert r.status_code == 200
        assert r.json()["degraded"] is True and r.json()["pipeline_version"] == CFG.version_id
        assert "1887" in r.json()["answer"]


def test_service_config_from_env() -> None:
    cfg = SERVICE.from_env(
        {"RAGLOOP_JUDGE": "none", "RAGLOOP_RATE_LIMIT_PER_MINUTE": "5", "RAGLOOP_CORS_ORIGINS": "https://a, https://b"}
    )
    assert cfg.judge is None and cfg.rate_limit_per_minute == 5 and cfg.cors_origins == ("https://a", "https://b")
    with pytest.raises(ValueError, match="RAGLOOP_INPROCESS_WORKER"):
        SERVICE.from_env({"RAGLOOP_INPROCESS_WORKER": "perhaps"})


def test_the_routing_knobs_reach_improve_from_the_environment() -> None:
    """`ragloop.improve` reads a `RoutingConfig`: the service's fields (and their `RAGLOOP_*`
    variables) carry it, with the same defaults."""
    assert ServiceConfig().routing == RoutingConfig()
    cfg = SERVICE.from_env({"RAGLOOP_TIER2_THRESHOLD": "0.4", "RAGLOOP_TIER3_DISAGREEMENT_DAILY_MAX": "3"})
    assert cfg.routing == RoutingConfig(tier2_threshold=0.4, tier3_disagreement_daily_max=3)


async def test_a_negative_rating_the_judge_disagrees_with_goes_to_review(collection: Collection, store: Store) -> None:
    """The rating reads as a score of 0: the judge's 0.9 disagrees by 0.9, and the day's floor sends
    it to review at once (where a correction gives diagnosis its ideal answer)."""
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        [answer_id] = await ask_all(c, keys.u, QUESTIONS[:1])
        r = await c.post(f"/v1/answers/{answer_id}/feedback", json={"rating": "negative"}, headers=keys.u)
        assert r.json()["improvement_queued"]
        worker = worker_for(store, judge=ContentJudge(), tier3_disagreement_daily_min=5)

        def judged() -> bool:
            return ("llm_judge", "completed") in tiers_of(store, answer_id)

        await drain_until(store, worker, judged)
        ev = store.evaluations.latest(answer_id, "llm_judge")
        assert ev is not None and ev.failure_evidence is not None
        assert ev.failure_evidence["disagreement"] >= 0.9 - 1e-9 and ev.failure_evidence["review_candidate"]
        queue = (await c.get("/v1/review", headers=keys.a)).json()
        assert [(i["answer_id"], i["reasons"]) for i in queue] == [(answer_id, ["tier1_tier2_disagreement"])]
