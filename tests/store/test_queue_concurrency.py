"""The queue under real concurrency: racing claimers, and a worker process killed mid-job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from ragloop.store import Answer, Database, Evaluation, EvaluationQueue, LeaseLostError, Store

WORKERS = 8
JOBS = 48


def test_racing_workers_claim_every_job_exactly_once(
    store_url: str, db: Database, make_answer: Callable[..., Answer]
) -> None:
    queue = EvaluationQueue(db)
    job_ids = {queue.enqueue(make_answer().answer_id, "heuristic").job_id for _ in range(JOBS)}
    claims: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(WORKERS)
    lock = threading.Lock()

    def worker(name: str) -> None:
        own = Database.from_url(store_url, pool_size=1, max_overflow=0)  # its own connection, like a process
        q = EvaluationQueue(own)
        try:
            start.wait()
            while (job := q.claim(name, lease_seconds=120)) is not None:
                with lock:
                    claims.append((job.job_id, name))
                assert job.lease_token is not None
                q.complete(job.job_id, name, job.lease_token)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            own.dispose()

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    per_job = Counter(job_id for job_id, _ in claims)
    assert set(per_job) == job_ids
    assert set(per_job.values()) == {1}, "a job was claimed twice"
    assert queue.depth() == {"queued": 0, "leased": 0, "done": JOBS, "dead": 0}
    assert len({w for _, w in claims}) > 1, "the race never happened"


CRASHING_WORKER = textwrap.dedent(
    """
    import sys, time
    from ragloop.store import Database, EvaluationQueue
    db = Database.from_url(sys.argv[1])
    queue = EvaluationQueue(db)
    for _ in range(int(sys.argv[2])):
        job = queue.claim("doomed", lease_seconds=float(sys.argv[3]))
        print(job.job_id, flush=True)
    print("working", flush=True)
    time.sleep(600)  # "evaluating" until killed
    """
)


def test_a_killed_worker_s_jobs_are_evaluated_exactly_once_after_its_leases_expire(
    store_url: str, db: Database, make_answer: Callable[..., Answer]
) -> None:
    store = Store(db)
    answers = [make_answer() for _ in range(10)]
    for a in answers:
        store.queue.enqueue(a.answer_id, "heuristic", {"answer_id": a.answer_id})
    lease_s = 1.0

    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_WORKER, store_url, "3", str(lease_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        doomed = [proc.stdout.readline().strip() for _ in range(3)]
        assert proc.stdout.readline().strip() == "working", proc.stderr.read() if proc.stderr else ""
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
    assert store.queue.depth()["leased"] == 3

    def drain(worker_id: str) -> None:
        while (job := store.queue.claim(worker_id, lease_seconds=60)) is not None:
            assert job.lease_token is not None
            with store.db.transaction():  # the result and the completion commit together
                store.evaluations.add(job.answer_id, "heuristic", heuristic_score=0.5)
                store.queue.complete(job.job_id, worker_id, job.lease_token)

    drain("survivor")  # the doomed worker's jobs are still leased: everything else gets done
    assert store.queue.depth() == {"queued": 0, "leased": 3, "done": 7, "dead": 0}
    deadline = time.monotonic() + 10
    while store.queue.stats().due < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    drain("restarted")

    assert store.queue.depth() == {"queued": 0, "leased": 0, "done": 10, "dead": 0}
    for job_id in doomed:
        job = store.queue.get(job_id)
        assert job is not None and job.attempts == 2 and job.leased_by == "restarted"
    with db.transaction(write=False) as s:
        per_answer = dict(s.execute(select(Evaluation.answer_id, func.count()).group_by(Evaluation.answer_id)).all())
    assert per_answer == {a.answer_id: 1 for a in answers}, "every answer is evaluated exactly once"

    # had the doomed worker come back to life, its completion would be refused (and its result rolled back)
    with pytest.raises(LeaseLostError, match="done"):
        store.queue.complete(doomed[0], "doomed", "0" * 32)


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
def test_postgres_claimers_skip_locked_rows_instead_of_waiting(
    db: Database, make_answer: Callable[..., Answer]
) -> None:
    queue = EvaluationQueue(db)
    first = queue.enqueue(make_answer().answer_id, "heuristic")
    second = queue.enqueue(make_answer().answer_id, "heuristic")
    other: list[str | None] = []
    with db.transaction():  # hold the first claim uncommitted, row lock and all
        held = queue.claim("holder")
        assert held is not None and held.job_id == first.job_id

        def claim_elsewhere() -> None:
            job = queue.claim("other")
            other.append(job.job_id if job else None)

        t = threading.Thread(target=claim_elsewhere)
        t.start()
        t.join(10)
        assert not t.is_alive(), "the second claimer waited on the first one's lock"
    assert other == [second.job_id]
