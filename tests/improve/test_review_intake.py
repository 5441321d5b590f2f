"""The capped tier-3 intake: a flood of tier-1/tier-2 disagreements sends at most the day's cap to
human review, the highest-disagreement ones, once the day is over; every day has its own cap; the
day's first few (the floor) go at once and count against it.
On SQLite, then PostgreSQL (the store fixtures of `tests/store`, imported by this directory's conftest)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from ragloop.improve.review_intake import GRACE_S, ReviewIntake
from ragloop.improve.routing import RoutingConfig, RoutingReason
from ragloop.store import Store
from ragloop.store.vocabulary import Tier
from tests.store.conftest import FakeClock

DAY1 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def clocked(store: Store, clock: FakeClock) -> tuple[Store, FakeClock]:
    """A store (SQLite, then PostgreSQL) whose queue runs on a settable clock, on the morning of DAY1."""
    clock.now = DAY1
    return store, clock


def ranked_only(share: float, daily_max: int) -> RoutingConfig:
    """No floor: every candidate waits for the day's ranked selection."""
    return RoutingConfig(
        tier3_disagreement_share=share, tier3_disagreement_daily_max=daily_max, tier3_disagreement_daily_min=0
    )


def judge(store: Store, intake: ReviewIntake, clock: FakeClock, disagreement: float) -> str:
    """One answer through a (simulated) tier-2 judgement with this disagreement; one second passes."""
    answer = store.queries.record_answer(session_id="s", question="q?", answer_text="a", pipeline_version="pv-t")
    store.queue.enqueue(answer.answer_id, Tier.LLM_JUDGE)
    job = store.queue.claim("w", tiers=[Tier.LLM_JUDGE])
    assert job is not None and job.lease_token is not None
    with store.db.transaction():
        intake.offer(answer.answer_id, disagreement)
        store.queue.complete(job.job_id, "w", job.lease_token)
    clock.now += timedelta(seconds=1)
    return answer.answer_id


def in_review(store: Store) -> set[str]:
    return {j.answer_id for j in store.queue.listed(Tier.HUMAN)}


def test_a_flood_yields_the_days_cap_highest_first(clocked: tuple[Store, FakeClock]) -> None:
    store, clock = clocked
    intake = ReviewIntake(store, ranked_only(0.1, 3))
    rng = random.Random(7)
    flood = [round(rng.uniform(0.31, 1.0), 4) for _ in range(30)]
    agreeing = [round(rng.uniform(0.0, 0.3), 4) for _ in range(10)]  # not candidates
    scores = {judge(store, intake, clock, d): d for d in flood + agreeing}
    assert store.queue.count(Tier.HUMAN_CANDIDATE) == 30 and in_review(store) == set()
    assert intake.select_due() == []  # the day is not over
    clock.now = DAY1.replace(hour=0) + timedelta(days=1, seconds=GRACE_S - 1)
    assert intake.select_due() == []  # nor is its grace period
    clock.now += timedelta(seconds=2)
    [day] = intake.select_due()
    top3 = sorted(scores, key=lambda a: -scores[a])[:3]
    assert (day.judged, day.candidates, day.cap) == (40, 30, 3)  # min(3, ceil(0.1 * 40))
    assert day.admitted == top3 and in_review(store) == set(top3)
    ranks = {j.answer_id: j.payload for j in store.queue.listed(Tier.HUMAN)}
    assert [ranks[a]["rank"] for a in top3] == [1, 2, 3] and ranks[top3[0]]["disagreement"] == max(flood)
    assert store.queue.count(Tier.HUMAN_CANDIDATE) == 0  # every candidate of the day is settled
    assert intake.select_due() == []  # idempotent

    # a candidate stamped in that day but committed after its selection takes no slot past the cap
    late_day = clock.now
    clock.now = DAY1 + timedelta(hours=14)
    late = judge(store, intake, clock, 0.999)
    clock.now = late_day
    [again] = intake.select_due()
    assert again.admitted == [] and late not in in_review(store) and len(in_review(store)) == 3


def test_the_share_binds_and_answers_already_in_review_take_no_slot(clocked: tuple[Store, FakeClock]) -> None:
    store, clock = clocked
    intake = ReviewIntake(store, ranked_only(0.1, 25))
    ids = [judge(store, intake, clock, d) for d in (0.9, 0.8, 0.7, 0.6, 0.5)]
    ids += [judge(store, intake, clock, 0.1) for _ in range(15)]  # 20 judged: the share allows 2
    store.queue.enqueue(ids[0], Tier.HUMAN, {"reasons": [RoutingReason.RANDOM_SAMPLE]})  # already waits for review
    clock.now += timedelta(days=1)
    [day] = intake.select_due()
    assert day.cap == 2 and day.admitted == [ids[1], ids[2]]
    assert in_review(store) == {ids[0], ids[1], ids[2]}
    reasons = {j.answer_id: j.payload["reasons"] for j in store.queue.listed(Tier.HUMAN)}
    assert reasons[ids[0]] == ["random_sample"]  # its payload is not rewritten


def test_each_day_has_its_own_cap_and_zero_turns_it_off(clocked: tuple[Store, FakeClock]) -> None:
    store, clock = clocked
    intake = ReviewIntake(store, ranked_only(1.0, 1))
    first = [judge(store, intake, clock, d) for d in (0.4, 0.5)]
    clock.now += timedelta(days=1)
    second = [judge(store, intake, clock, d) for d in (0.95, 0.45)]
    clock.now += timedelta(days=1)
    days = intake.select_due()
    assert [d.admitted for d in days] == [[first[1]], [second[0]]]
    off = ReviewIntake(store, RoutingConfig(tier3_disagreement_daily_max=0))
    judge(store, off, clock, 0.99)
    clock.now += timedelta(days=1)
    [day] = off.select_due()
    assert day.cap == 0 and day.admitted == [] and store.queue.count(Tier.HUMAN_CANDIDATE) == 0


def test_the_floor_goes_to_review_at_once_and_counts_against_the_cap(clocked: tuple[Store, FakeClock]) -> None:
    store, clock = clocked
    cfg = RoutingConfig(tier3_disagreement_share=0.1, tier3_disagreement_daily_max=25, tier3_disagreement_daily_min=2)
    intake = ReviewIntake(store, cfg)
    early = [judge(store, intake, clock, d) for d in (0.5, 0.6)]
    assert in_review(store) == set(early)  # the same day, before any selection
    payloads = {j.answer_id: j.payload for j in store.queue.listed(Tier.HUMAN)}
    assert [payloads[a]["rank"] for a in early] == [1, 2] and payloads[early[0]]["day"] == DAY1.date().isoformat()
    held = [judge(store, intake, clock, d) for d in (0.9, 0.8, 0.7, 0.65)]
    _ = [judge(store, intake, clock, 0.1) for _ in range(34)]  # 40 judged: the share allows 4
    assert store.queue.count(Tier.HUMAN_CANDIDATE) == 4
    clock.now = DAY1.replace(hour=0) + timedelta(days=1, seconds=GRACE_S + 1)
    [day] = intake.select_due()
    assert (day.judged, day.cap) == (40, 4) and day.admitted == held[:2]  # 4 - the 2 sent at once
    # a quiet day: the share rounds to 1, the floor still sends 2 (at once), and nothing more
    quiet = [judge(store, intake, clock, d) for d in (0.4, 0.35, 0.33)]
    assert in_review(store) == set(early + held[:2] + quiet[:2])
    clock.now += timedelta(days=1)
    [day2] = intake.select_due()
    assert (day2.judged, day2.cap, day2.admitted) == (3, 2, [])
    assert ReviewIntake(store, RoutingConfig(tier3_disagreement_daily_max=1, tier3_disagreement_daily_min=5)).floor == 1
