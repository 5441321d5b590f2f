"""The capped tier-3 intake: a flood of tier-1/tier-2 disagreements sends at most the day's cap to
human review, the highest-disagreement ones, once the day is over; the review gauges match."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ragloop.retrieval.collection import Collection
from ragloop.service.review_intake import CANDIDATE, GRACE_S, ReviewIntake
from ragloop.store import EvaluationQueue, Store
from tests.service.conftest import SERVICE, build_app, make_keys, open_store, running, worker_for

pytestmark = pytest.mark.anyio

DAY1 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
QUESTIONS = [
    "When was the Zorblat Bridge completed?",
    "How tall is the Quill Tower?",
    "When did the ferry service end?",
    "Who designed the Quill Tower?",
    "Who built the Zorblat Bridge?",
]


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clocked(store_url: str) -> Iterator[tuple[Store, Clock]]:
    """A store (SQLite, then PostgreSQL) whose queue runs on a settable clock."""
    store = open_store(store_url)
    clock = Clock(DAY1)
    store.queue = EvaluationQueue(store.db, clock=clock)
    yield store, clock
    store.close()


def judge(store: Store, intake: ReviewIntake, clock: Clock, disagreement: float) -> str:
    """One answer through a (simulated) tier-2 judgement with this disagreement; one second passes."""
    answer = store.queries.record_answer(session_id="s", question="q?", answer_text="a", pipeline_version="pv-t")
    store.queue.enqueue(answer.answer_id, "llm_judge")
    job = store.queue.claim("w", tiers=["llm_judge"])
    assert job is not None and job.lease_token is not None
    with store.db.transaction():
        intake.offer(answer.answer_id, disagreement)
        store.queue.complete(job.job_id, "w", job.lease_token)
    clock.now += timedelta(seconds=1)
    return answer.answer_id


def in_review(store: Store) -> set[str]:
    return {j.answer_id for j in store.queue.listed("human")}


def test_a_flood_yields_the_days_cap_highest_first(clocked: tuple[Store, Clock]) -> None:
    store, clock = clocked
    intake = ReviewIntake(store, SERVICE.with_(tier3_disagreement_share=0.1, tier3_disagreement_daily_max=3))
    rng = random.Random(7)
    flood = [round(rng.uniform(0.31, 1.0), 4) for _ in range(30)]
    agreeing = [round(rng.uniform(0.0, 0.3), 4) for _ in range(10)]  # not candidates
    scores = {judge(store, intake, clock, d): d for d in flood + agreeing}
    assert store.queue.count(CANDIDATE) == 30 and in_review(store) == set()
    assert intake.select_due() == []  # the day is not over
    clock.now = DAY1.replace(hour=0) + timedelta(days=1, seconds=GRACE_S - 1)
    assert intake.select_due() == []  # nor is its grace period
    clock.now += timedelta(seconds=2)
    [day] = intake.select_due()
    top3 = sorted(scores, key=lambda a: -scores[a])[:3]
    assert (day.judged, day.candidates, day.cap) == (40, 30, 3)  # min(3, ceil(0.1 * 40))
    assert day.admitted == top3 and in_review(store) == set(top3)
    ranks = {j.answer_id: j.payload for j in store.queue.listed("human")}
    assert [ranks[a]["rank"] for a in top3] == [1, 2, 3] and ranks[top3[0]]["disagreement"] == max(flood)
    assert store.queue.count(CANDIDATE) == 0  # every candidate of the day is settled
    assert intake.select_due() == []  # idempotent

    # a candidate stamped in that day but committed after its selection takes no slot past the cap
    late_day = clock.now
    clock.now = DAY1 + timedelta(hours=14)
    late = judge(store, intake, clock, 0.999)
    clock.now = late_day
    [again] = intake.select_due()
    assert again.admitted == [] and late not in in_review(store) and len(in_review(store)) == 3


def test_the_share_binds_and_answers_already_in_review_take_no_slot(clocked: tuple[Store, Clock]) -> None:
    store, clock = clocked
    intake = ReviewIntake(store, SERVICE.with_(tier3_disagreement_share=0.1, tier3_disagreement_daily_max=25))
    ids = [judge(store, intake, clock, d) for d in (0.9, 0.8, 0.7, 0.6, 0.5)]
    ids += [judge(store, intake, clock, 0.1) for _ in range(15)]  # 20 judged: the share allows 2
    store.queue.enqueue(ids[0], "human", {"reasons": ["random_sample"]})  # already waits for review
    clock.now += timedelta(days=1)
    [day] = intake.select_due()
    assert day.cap == 2 and day.admitted == [ids[1], ids[2]]
    assert in_review(store) == {ids[0], ids[1], ids[2]}
    reasons = {j.answer_id: j.payload["reasons"] for j in store.queue.listed("human")}
    assert reasons[ids[0]] == ["random_sample"]  # its payload is not rewritten


def test_each_day_has_its_own_cap_and_zero_turns_it_off(clocked: tuple[Store, Clock]) -> None:
    store, clock = clocked
    intake = ReviewIntake(store, SERVICE.with_(tier3_disagreement_share=1.0, tier3_disagreement_daily_max=1))
    first = [judge(store, intake, clock, d) for d in (0.4, 0.5)]
    clock.now += timedelta(days=1)
    second = [judge(store, intake, clock, d) for d in (0.95, 0.45)]
    clock.now += timedelta(days=1)
    days = intake.select_due()
    assert [d.admitted for d in days] == [[first[1]], [second[0]]]
    off = ReviewIntake(store, SERVICE.with_(tier3_disagreement_daily_max=0))
    judge(store, off, clock, 0.99)
    clock.now += timedelta(days=1)
    [day] = off.select_due()
    assert day.cap == 0 and day.admitted == [] and store.queue.count(CANDIDATE) == 0


def gauge(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert m is not None, name
    return float(m.group(1))


async def test_the_worker_caps_a_flood_and_the_gauges_match(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    # every answer to tier 2, every disagreement a candidate, no random tier-3 sample; at most 2 a day
    changes: dict[str, Any] = {
        "tier2_threshold": 1.01,
        "tier3_disagreement": -1.0,
        "tier3_sample_rate": 0.0,
        "tier3_disagreement_share": 1.0,
        "tier3_disagreement_daily_max": 2,
    }
    async with running(build_app(store)) as c:
        ids = []
        for i, q in enumerate(QUESTIONS):
            r = await c.post("/v1/query", json={"question": q, "session_id": f"cap{i}"}, headers=keys.u)
            assert r.status_code == 200, r.text
            ids.append(r.json()["answer_id"])
        await worker_for(store, **changes).run(drain=True)
        metrics = (await c.get("/metrics", headers=keys.a)).text
        assert gauge(metrics, "ragloop_review_candidates") == len(ids)
        assert gauge(metrics, "ragloop_review_queue_depth") == 0
        # once the day (and its grace) is over, the worker loop chooses the intake (a fresh worker sweeps at once)
        real = store.queue.clock
        store.queue.clock = lambda: real() + timedelta(days=2)
        try:
            await worker_for(store, **changes).run(drain=True)
        finally:
            store.queue.clock = real
        disagreement = {}
        for a in ids:
            ev = store.evaluations.latest(a, "llm_judge")
            assert ev is not None and ev.failure_evidence is not None and ev.failure_evidence["review_candidate"]
            disagreement[a] = ev.failure_evidence["disagreement"]
        queue = (await c.get("/v1/review", headers=keys.a)).json()
        expected = sorted(ids, key=lambda a: -disagreement[a])[:2]
        assert {i["answer_id"] for i in queue} == set(expected)
        assert all(i["reasons"] == ["tier1_tier2_disagreement"] for i in queue)
        metrics = (await c.get("/metrics", headers=keys.a)).text
        assert gauge(metrics, "ragloop_review_queue_depth") == 2 == store.queue.count("human")
        assert gauge(metrics, "ragloop_review_candidates") == 0
