"""Document jobs (uploads and deletions the service runs in the background): their life, progress and
outcome, durable across restarts.

Life of a job::

    create ──► queued ──start──► running ──finish──► succeeded | failed
                                   │  ▲
                                   └──┘ start again: resumed after a restart (`attempts` counts starts)

`pending(owner)` lists what an instance left unfinished, for it to resume (or fail) at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from ragloop.store.db import Database
from ragloop.store.document_models import (
    DOCUMENT_JOB_KINDS,
    DOCUMENT_JOB_PENDING,
    DocumentJob,
)
from ragloop.store.models import utcnow
from ragloop.store.repositories._base import StoreConflictError, _require

MAX_ERROR_CHARS = 4000
FINAL_STATUSES = ("succeeded", "failed")


class DocumentJobs:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, job_id: str, *, owner: str, collection: str, kind: str, files: Sequence[str]) -> DocumentJob:
        """A new `queued` job (the id is the caller's: uploads are staged under it before the job exists)."""
        if kind not in DOCUMENT_JOB_KINDS:
            raise ValueError(f"kind must be one of {DOCUMENT_JOB_KINDS}, got {kind!r}")
        now = utcnow()
        row = DocumentJob(
            job_id=job_id,
            owner=owner,
            collection=collection,
            kind=kind,
            status="queued",
            files=list(files),
            progress={"phase": "", "done": 0, "total": 0},
            attempts=0,
            created_at=now,
            updated_at=now,
        )
        with self.db.transaction() as s:
            s.add(row)
            s.flush()
            return row

    def get(self, job_id: str) -> DocumentJob | None:
        with self.db.transaction(write=False) as s:
            return s.get(DocumentJob, job_id)

    def recent(
        self, *, collection: str | None = None, status: str | None = None, limit: int = 50, offset: int = 0
    ) -> list[DocumentJob]:
        """Newest first."""
        stmt = select(DocumentJob)
        if collection is not None:
            stmt = stmt.where(DocumentJob.collection == collection)
        if status is not None:
            stmt = stmt.where(DocumentJob.status == status)
        stmt = stmt.order_by(DocumentJob.created_at.desc(), DocumentJob.job_id).limit(limit).offset(offset)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt))

    def pending(self, owner: str) -> list[DocumentJob]:
        """The owner's `queued` and `running` jobs, oldest first (the order they were accepted in)."""
        stmt = (
            select(DocumentJob)
            .where(DocumentJob.owner == owner, DocumentJob.status.in_(DOCUMENT_JOB_PENDING))
            .order_by(DocumentJob.created_at, DocumentJob.job_id)
        )
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt))

    def start(self, job_id: str) -> DocumentJob:
        """`running` now (again, when resumed); raises StoreConflictError for a finished job."""
        with self.db.transaction() as s:
            row: DocumentJob = _require(s, DocumentJob, job_id)
            if row.status in FINAL_STATUSES:
                raise StoreConflictError(f"document job {job_id} already {row.status}")
            now = utcnow()
            row.status, row.started_at, row.updated_at = "running", now, now
            row.attempts += 1
            s.flush()
            return row

    def set_progress(self, job_id: str, phase: str, done: int, total: int) -> None:
        with self.db.transaction() as s:
            row: DocumentJob = _require(s, DocumentJob, job_id)
            row.progress = {"phase": phase, "done": int(done), "total": int(total)}
            row.updated_at = utcnow()

    def finish(
        self,
        job_id: str,
        status: str,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        progress: dict[str, Any] | None = None,
    ) -> DocumentJob:
        """Record the outcome (`succeeded` with its result, or `failed` with the error); raises
        StoreConflictError when the job already finished."""
        if status not in FINAL_STATUSES:
            raise ValueError(f"a job finishes as one of {FINAL_STATUSES}, not {status!r}")
        with self.db.transaction() as s:
            row: DocumentJob = _require(s, DocumentJob, job_id)
            if row.status in FINAL_STATUSES:
                raise StoreConflictError(f"document job {job_id} already {row.status}")
            now = utcnow()
            row.status, row.result, row.finished_at, row.updated_at = status, result, now, now
            row.error = error[:MAX_ERROR_CHARS] if error is not None else None
            if progress is not None:
                row.progress = dict(progress)
            s.flush()
            return row
