"""Evaluation-queue semantics on a fake clock: idempotent enqueue, ordering, leases, retries, dead letters."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from ragloop.store import Answer, EvaluationQueue, LeaseLostError, NotFoundError, Store

from .conftest import FakeClock


@pytest.fixture
def queue(store: Store) -> EvaluationQueue:
    return store.queue  # max_attempts=3, backoff 2 s · 2^(n-1), fake clock


def test_enqueue_is_idempotent_per_answer_and_tier(queue: EvaluationQueue, make_answer: Callable[..., Answer]) -> None:
    a = make_answer()
    first = queue.enqueue(a.answer_id, "heuristic", {"question": "q"})
    again = queue.enqueue(a.answer_id, "heuristic", {"question": "different payload"})
    judge = queue.enqueue(a.answer_id, "llm_judge")
    assert again.job_id == first.job_id and again.payload == {"question": "q"}
    assert judge.job_id != first.job_id
    assert (first.status, first.attempts, first.max_attempts) == ("queued", 0, 3)
    assert [j.tier for j in queue.for_answer(a.answer_id)] == ["heuristic", "llm_judge"]
    with pytest.raises(NotFoundError):
        queue.enqueue("0" * 32, "heuristic")


def test_claim_takes_the_oldest_due_job(
    queue: EvaluationQueue, clock: FakeClock, make_answer: Callable[..., Answer]
) -> None:
    jobs = []
    for _ in range(3):
        jobs.append(queue.enqueue(make_answer().answer_id, "heuristic"))
        clock.advance(1)
    later = queue.enqueue(make_answer().answer_id, "heuristic", delay_s=60)
    claimed = [queue.claim("w", lease_seconds=300) for _ in range(4)]
    assert [j.job_id if j else None for j in claimed] == [j.job_id for j in jobs] + [None]
    assert claimed[0] is not None and claimed[0].status == "leased" and claimed[0].attempts == 1
    assert claimed[0].leased_by == "w" and claimed[0].lease_token
    assert claimed[0].lease_expires_at == clock.now + timedelta(seconds=300)  # aware UTC, from RETURNING
    assert claimed[0].created_at.tzinfo is not None
    clock.advance(60)
    got = queue.claim("w")
    assert got is not None and got.job_id == later.job_id


def test_claim_can_be_restricted_to_tiers(queue: EvaluationQueue, make_answer: Callable[..., Answer]) -> None:
    a = make_answer()
    queue.enqueue(a.answer_id, "heuristic")
    judge = queue.enqueue(a.answer_id, "llm_judge")
    got = queue.claim("judge-worker", tiers=["llm_judge"])
    assert got is not None and got.job_id == judge.job_id
    assert queue.claim("judge-worker", tiers=["llm_judge"]) is None


def test_complete_needs_the_current_lease(
    queue: EvaluationQueue, clock: FakeClock, make_answer: Callable[..., Answer]
) -> None:
    queue.enqueue(make_answer().answer_id, "heuristic")
    job = queue.claim("w1", lease_seconds=30)
    assert job is not None and job.lease_token is not None
    with pytest.raises(LeaseLostError, match="another lease"):
        queue.complete(job.job_id, "w2", job.lease_token)
    with pytest.raises(LeaseLostError, match="another lease"):
        queue.complete(job.job_id, "w1", "0" * 32)
    done = queue.complete(job.job_id, "w1", job.lease_token)
    assert done.status == "done" and done.completed_at == clock.now
    with pytest.raises(LeaseLostError, match="done"):
        queue.complete(job.job_id, "w1", job.lease_token)
    with pytest.raises(LeaseLostError, match="no evaluation job"):
        queue.complete("f" * 32, "w1", job.lease_token)
    assert queue.claim("w1") is None


def test_an_expired_lease_is_claimable_again_and_the_old_worker_cannot_complete(
    queue: EvaluationQueue, clock: FakeClock, make_answer: Callable[..., Answer]
) -> None:
    queue.enqueue(make_answer().answer_id, "heuristic")
    stale = queue.claim("slow", lease_seconds=30)
    assert stale is not None and stale.lease_token is not None
    clock.advance(29)
    assert queue.claim("fast") is None  # still leased
    clock.advance(2)
    with pytest.raises(LeaseLostError, match="expired"):  # expired, not yet reclaimed: still refused
        queue.complete(stale.job_id, "slow", stale.lease_token)
    fresh = queue.claim("fast", lease_seconds=30)
    assert fresh is not None and fresh.job_id == stale.job_id
    assert fresh.attempts == 2 and fresh.lease_token != stale.lease_token
    with pytest.raises(LeaseLostError):
        queue.complete(stale.job_id, "slow", stale.lease_token)
    assert fresh.lease_token is not None
    assert queue.complete(fresh.job_id, "fast", fresh.lease_token).leased_by == "fast"


def test_extend_lease(queue: EvaluationQueue, clock: FakeClock, make_answer: Callable[..., Answer]) -> None:
    queue.enqueue(make_answer().answer_id, "llm_judge")
    job = queue.claim("w", lease_seconds=10)
    assert job is not None and job.lease_token is not None
    clock.advance(8)
    queue.extend_lease(job.job_id, "w", job.lease_token, 10)
    clock.advance(8)
    assert queue.claim("other") is None
    assert queue.complete(job.job_id, "w", job.lease_token).status == "done"


def test_failures_back_off_then_dead_letter_with_the_reason(
    queue: EvaluationQueue, clock: FakeClock, make_answer: Callable[..., Answer]
) -> None:
    queue.enqueue(make_answer().answer_id, "llm_judge")
    delays = []
    for attempt in (1, 2):
        job = queue.claim("w")
        assert job is not None and job.attempts == attempt and job.lease_token is not None
        failed = queue.fail(job.job_id, "w", job.lease_token, f"judge timeout #{attempt}")
        assert failed.status == "queued" and failed.last_error == f"judge timeout #{attempt}"
        delays.append((failed.available_at - clock.now).total_seconds())
        assert queue.claim("w") is None  # backing off
        clock.advance(delays[-1])
    assert delays == [2.0, 4.0]
    job = queue.claim("w")
    assert job is not None and job.attempts == 3 and job.lease_token is not None
    dead = queue.fail(job.job_id, "w", job.lease_token, "judge timeout #3")
    assert dead.status == "dead" and dead.dead_reason == "failed 3 of 3 attempts: judge timeout #3"
    clock.advance(3600)
    assert queue.claim("w") is None
    assert [j.job_id for j in queue.dead_letters()] == [job.job_id]

    revived = queue.requeue(job.job_id)
    assert (revived.status, revived.attempts, revived.dead_reason) == ("queued", 0, None)
    assert queue.claim("w") is not None


def test_non_retryable_failures_die_at_once(queue: EvaluationQueue, make_answer: Callable[..., Answer]) -> None:
    queue.enqueue(make_answer().answer_id, "llm_judge")
    job = queue.claim("w")
    assert job is not None and job.lease_token is not None
    dead = queue.fail(job.job_id, "w", job.lease_token, "answer has no context", retry=False)
    assert dead.status == "dead" and "not retryable" in (dead.dead_reason or "")


def test_a_lease_that_expires_on_the_last_attempt_is_dead_lettered(
    queue: EvaluationQueue, clock: FakeClock, make_answer: Callable[..., Answer]
) -> None:
    job = queue.enqueue(make_answer().answer_id, "heuristic")
    for _ in range(3):  # every worker crashes
        assert queue.claim("crashy", lease_seconds=10) is not None
        clock.advance(11)
    assert queue.claim("w") is None
    dead = queue.get(job.job_id)
    assert dead is not None and dead.status == "dead" and dead.attempts == 3
    assert "lease expired" in (dead.dead_reason or "")


def test_depth_lag_and_stats(queue: EvaluationQueue, clock: FakeClock, make_answer: Callable[..., Answer]) -> None:
    assert queue.lag_seconds() == 0.0
    assert queue.depth() == {"queued": 0, "leased": 0, "done": 0, "dead": 0}
    for tier in ("heuristic", "heuristic", "llm_judge"):
        queue.enqueue(make_answer().answer_id, tier)
        clock.advance(1)
    clock.advance(9)
    job = queue.claim("w")
    assert job is not None and job.lease_token is not None
    queue.complete(job.job_id, "w", job.lease_token)
    queue.claim("w")
    clock.advance(5)
    assert queue.depth() == {"queued": 1, "leased": 1, "done": 1, "dead": 0}
    assert queue.lag_seconds() == 16.0  # the second job, enqueued 1 s after the first
    stats = queue.stats()
    assert stats.depth == 2 and stats.due == 1 and stats.oldest_pending_age_s == 16.0
    assert stats.by_tier["heuristic"]["done"] == 1 and sum(stats.by_tier["llm_judge"].values()) == 1
    assert stats.pending(["heuristic"]) == 1 and stats.pending(["heuristic", "llm_judge"]) == 2
    assert {t: (clock.now - at).total_seconds() for t, at in stats.oldest_pending_by_tier.items()} == {
        "heuristic": 16.0,
        "llm_judge": 15.0,
    }


def test_result_and_completion_commit_together(
    store: Store, clock: FakeClock, make_answer: Callable[..., Answer]
) -> None:
    """The exactly-once pattern: a worker that lost its lease loses its result too."""
    answer = make_answer()
    store.queue.enqueue(answer.answer_id, "heuristic")
    stale = store.queue.claim("slow", lease_seconds=5)
    assert stale is not None and stale.lease_token is not None
    clock.advance(6)
    fresh = store.queue.claim("fast", lease_seconds=5)
    assert fresh is not None and fresh.lease_token is not None

    with pytest.raises(LeaseLostError), store.db.transaction():
        store.evaluations.add(answer.answer_id, "heuristic", heuristic_score=0.1)
        store.queue.complete(stale.job_id, "slow", stale.lease_token)
    with store.db.transaction():
        store.evaluations.add(answer.answer_id, "heuristic", heuristic_score=0.9)
        store.queue.complete(fresh.job_id, "fast", fresh.lease_token)
    assert [e.heuristic_score for e in store.evaluations.for_answer(answer.answer_id)] == [0.9]


def test_count_listed_and_close_for_jobs_no_worker_claims(
    queue: EvaluationQueue, clock: FakeClock, make_answer: Callable[..., Answer]
) -> None:
    start = clock.now
    held = []
    for _ in range(3):
        held.append(queue.enqueue(make_answer().answer_id, "held"))
        clock.advance(1)
    clock.advance(7)
    review = queue.enqueue(make_answer().answer_id, "human")
    judge = queue.enqueue(make_answer().answer_id, "llm_judge")
    assert queue.count("human") == 1 and queue.count("held") == 3 and queue.count() == 5
    assert queue.count("held", since=start, until=start + timedelta(seconds=10)) == 3
    assert queue.count("held", since=start + timedelta(seconds=10)) == 0
    assert [j.job_id for j in queue.listed("held")] == [j.job_id for j in held]  # oldest first
    assert [j.job_id for j in queue.listed("held", since=start + timedelta(seconds=1))] == [
        held[1].job_id,
        held[2].job_id,
    ]
    assert queue.claim("w", tiers=["held", "human"]) is not None  # claimable if asked for: close only the queued
    leased = next(j for j in queue.listed("held", statuses=("leased",)))
    assert queue.close([j.job_id for j in held]) == 2
    assert queue.get(leased.job_id).status == "leased"  # type: ignore[union-attr]
    assert queue.count("held", statuses=("done",)) == 2 and queue.count("held") == 0
    # completions are counted by when they happened
    got = queue.claim("w", tiers=["llm_judge"])
    assert got is not None and got.job_id == judge.job_id and got.lease_token is not None
    clock.advance(5)
    queue.complete(got.job_id, "w", got.lease_token)
    after = clock.now
    assert queue.count("llm_judge", statuses=("done",), since=after, by="completed_at") == 1
    assert queue.count("llm_judge", statuses=("done",), until=after, by="completed_at") == 0
    assert queue.count("human") == 1 and review.status == "queued"


def test_exclusive_joins_queue_calls_into_one_transaction(
    queue: EvaluationQueue, make_answer: Callable[..., Answer]
) -> None:
    a, b = make_answer(), make_answer()
    with pytest.raises(RuntimeError), queue.exclusive("test"):
        queue.enqueue(a.answer_id, "held")
        raise RuntimeError("decided against it")
    assert queue.count("held") == 0  # rolled back with the transaction
    with queue.exclusive("test"):
        queue.enqueue(b.answer_id, "held")
        queue.close([j.job_id for j in queue.listed("held")])
    assert queue.count("held", statuses=("done",)) == 1


def test_settle_closes_a_queued_or_leased_job_of_one_tier(
    queue: EvaluationQueue, make_answer: Callable[..., Answer]
) -> None:
    a, b = make_answer(), make_answer()
    queue.enqueue(a.answer_id, "human")
    assert queue.claim("w", tiers=["human"]) is not None  # a's review job, leased
    queue.enqueue(a.answer_id, "heuristic")
    queue.enqueue(b.answer_id, "human")
    assert queue.settle(a.answer_id, "human") == 1
    assert queue.settle(a.answer_id, "human") == 0  # done already
    jobs = {(j.answer_id, j.tier): j for j in queue.for_answer(a.answer_id) + queue.for_answer(b.answer_id)}
    done = jobs[(a.answer_id, "human")]
    assert done.status == "done" and done.completed_at is not None and done.lease_expires_at is None
    assert jobs[(a.answer_id, "heuristic")].status == "queued" and jobs[(b.answer_id, "human")].status == "queued"


def test_hold_dead_returns_only_dead_jobs(queue: EvaluationQueue, make_answer: Callable[..., Answer]) -> None:
    job = queue.enqueue(make_answer().answer_id, "heuristic")
    assert queue.hold_dead(job.job_id) is None
    got = queue.claim("w")
    assert got is not None and got.lease_token is not None
    queue.fail(got.job_id, "w", got.lease_token, "boom", retry=False)
    with queue.db.transaction():
        held = queue.hold_dead(job.job_id)
        assert held is not None and held.status == "dead" and held.job_id == job.job_id
    queue.requeue(job.job_id)
    assert queue.hold_dead(job.job_id) is None
