"""The `document_jobs` table: uploads and deletions of documents, run in the background by the service.

Its own module (beside `models`) because it is the service's own bookkeeping, not part of the
improvement loop's data; it shares `Base` and the column conventions of `ragloop.store.models`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from ragloop.store.models import ANSWER_ID, SHORT, Base, NullableJSON, _in, utcnow

DOCUMENT_JOB_KINDS = ("ingest", "delete")
DOCUMENT_JOB_STATUSES = ("queued", "running", "succeeded", "failed")
DOCUMENT_JOB_PENDING = ("queued", "running")


class DocumentJob(Base):
    """One document job. `owner` names the service instance whose `RAGLOOP_HOME` holds the collection
    and the staged files: only that instance runs (or, after a crash, resumes) the job; any instance
    can read it."""

    __tablename__ = "document_jobs"

    job_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True)
    owner: Mapped[str] = mapped_column(String(255))
    collection: Mapped[str] = mapped_column(SHORT)
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    files: Mapped[list[Any]] = mapped_column(default=list)
    """The documents the job adds (uploaded file names) or deletes (document ids)."""
    progress: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """`{"phase", "done", "total"}` as the ingest reports it."""
    result: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    """Times the job was started: more than one means it was resumed after a restart."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        Index("ix_document_jobs_owner_status", "owner", "status"),
        Index("ix_document_jobs_collection", "collection", "created_at"),
        CheckConstraint(_in("kind", DOCUMENT_JOB_KINDS), name="kind"),
        CheckConstraint(_in("status", DOCUMENT_JOB_STATUSES), name="status"),
    )
