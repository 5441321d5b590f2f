"""The document-job repository (uploads and deletions run by the service), on both backends."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from ragloop.store import NotFoundError, Store, StoreConflictError


def test_a_job_from_queued_to_succeeded(store: Store) -> None:
    job = store.document_jobs.create("j1", owner="host:/home", collection="docs", kind="ingest", files=["a.md", "b.md"])
    assert (job.status, job.attempts, job.files) == ("queued", 0, ["a.md", "b.md"])
    assert job.progress == {"phase": "", "done": 0, "total": 0} and job.result is None
    assert job.created_at.tzinfo is not None and job.started_at is None and job.finished_at is None

    running = store.document_jobs.start("j1")
    assert running.status == "running" and running.attempts == 1 and running.started_at is not None
    store.document_jobs.set_progress("j1", "embed", 3, 10)
    got = store.document_jobs.get("j1")
    assert got is not None and got.progress == {"phase": "embed", "done": 3, "total": 10}

    done = store.document_jobs.finish("j1", "succeeded", result={"files": {"new": 2}, "note": "é✓"})
    assert done.status == "succeeded" and done.finished_at is not None and done.error is None
    again = store.document_jobs.get("j1")
    assert again is not None and again.result == {"files": {"new": 2}, "note": "é✓"}
    assert again.finished_at == done.finished_at and again.started_at == running.started_at
    # a finished job cannot be started or finished again
    with pytest.raises(StoreConflictError):
        store.document_jobs.start("j1")
    with pytest.raises(StoreConflictError):
        store.document_jobs.finish("j1", "failed", error="late")
    assert store.document_jobs.get("j1").status == "succeeded"  # type: ignore[union-attr]


def test_failure_keeps_the_error_and_a_restart_counts_attempts(store: Store) -> None:
    store.document_jobs.create("j2", owner="o", collection="docs", kind="delete", files=["x.md"])
    store.document_jobs.start("j2")
    assert store.document_jobs.start("j2").attempts == 2  # resumed after a restart
    failed = store.document_jobs.finish("j2", "failed", error="boom " * 2000, progress={"phase": "delete"})
    assert failed.status == "failed" and failed.error is not None and len(failed.error) == 4000
    assert failed.progress == {"phase": "delete"} and failed.result is None


def test_pending_is_per_owner_and_oldest_first(store: Store) -> None:
    for i, owner in enumerate(["a", "b", "a", "a"]):
        store.document_jobs.create(f"p{i}", owner=owner, collection="c", kind="ingest", files=[f"{i}.md"])
    store.document_jobs.start("p2")
    store.document_jobs.start("p3")
    store.document_jobs.finish("p3", "succeeded", result={})
    assert [j.job_id for j in store.document_jobs.pending("a")] == ["p0", "p2"]
    assert [j.job_id for j in store.document_jobs.pending("b")] == ["p1"]
    assert store.document_jobs.pending("nobody") == []


def test_recent_lists_newest_first_with_filters(store: Store) -> None:
    for i in range(5):
        store.document_jobs.create(f"r{i}", owner="o", collection="c1" if i % 2 else "c2", kind="ingest", files=[])
    store.document_jobs.start("r4")
    store.document_jobs.finish("r4", "failed", error="bad")
    assert [j.job_id for j in store.document_jobs.recent()] == ["r4", "r3", "r2", "r1", "r0"]
    assert [j.job_id for j in store.document_jobs.recent(collection="c1")] == ["r3", "r1"]
    assert [j.job_id for j in store.document_jobs.recent(status="failed")] == ["r4"]
    assert [j.job_id for j in store.document_jobs.recent(limit=2, offset=1)] == ["r3", "r2"]


def test_unknown_jobs_and_bad_values_are_refused(store: Store) -> None:
    assert store.document_jobs.get("nope") is None
    with pytest.raises(NotFoundError):
        store.document_jobs.start("nope")
    with pytest.raises(NotFoundError):
        store.document_jobs.set_progress("nope", "x", 0, 0)
    with pytest.raises(ValueError):
        store.document_jobs.create("k", owner="o", collection="c", kind="rename", files=[])
    store.document_jobs.create("k", owner="o", collection="c", kind="ingest", files=[])
    with pytest.raises(ValueError):
        store.document_jobs.finish("k", "running")
    with pytest.raises(IntegrityError):  # the primary key: a job id is used once
        store.document_jobs.create("k", owner="o", collection="c", kind="ingest", files=[])
