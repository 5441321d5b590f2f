"""The golden set's history and review queue: `golden_set_versions`, `golden_candidates`.

Their own module (beside `models`, like `improve_models`) because they are the golden set's
bookkeeping, not production traffic. They share `Base` and the column conventions of
`ragloop.store.models`.

- `golden_set_versions`: one row per change of the golden set (an add, an import batch, a
  revision, a deprecation, an approval). `version` is the golden-set version number: it only grows,
  and every `golden_set_entries` row carries the version that added it (`added_in`) and, once
  deprecated, the one that retired it (`deprecated_in`), so the set *at version N* is
  `added_in <= N < coalesce(deprecated_in, ∞)`: any past version can be rebuilt and evaluated.
- `golden_candidates`: the review queue. A machine (nightly nomination, adversarial generator)
  proposes; only a human approval inserts a golden entry. `evidence` keeps the machine scores that
  justified a nomination for the audit, and no review view shows it (a reviewer who sees "judge
  0.97" rubber-stamps). `question_key` is unique so a question is proposed once, whatever its fate.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from ragloop.store.models import ANSWER_ID, SHORT, Base, _in, new_id, utcnow
from ragloop.store.vocabulary import CandidateStatus, GoldenChange

CANDIDATE_STATUSES: tuple[CandidateStatus, ...] = tuple(CandidateStatus)
GOLDEN_CHANGES: tuple[GoldenChange, ...] = tuple(GoldenChange)


class GoldenSetVersion(Base):
    """One change of the golden set; its `version` is the set's version number after it."""

    __tablename__ = "golden_set_versions"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(128))
    note: Mapped[str | None] = mapped_column(Text)
    added: Mapped[list[Any]] = mapped_column(default=list)
    """entry_ids inserted by this change."""
    deprecated: Mapped[list[Any]] = mapped_column(default=list)
    """entry_ids deprecated by this change."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (CheckConstraint(_in("kind", GOLDEN_CHANGES), name="kind"),)


class GoldenCandidate(Base):
    """A machine-proposed golden question waiting for (or past) a human decision."""

    __tablename__ = "golden_candidates"

    candidate_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    question: Mapped[str] = mapped_column(Text)
    question_key: Mapped[str] = mapped_column(SHORT, unique=True)
    proposed_answer: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(32))
    generator: Mapped[str | None] = mapped_column(String(64))
    """The adversarial kind (multi_document, misleading, negation, near_miss_entity) or `nightly`."""
    answer_id: Mapped[str | None] = mapped_column(ANSWER_ID)
    """The production answer a nomination came from (no FK: answers may be deleted, the proposal stays)."""
    required_doc_ids: Mapped[list[Any]] = mapped_column(default=list)
    required_chunk_ids: Mapped[list[Any]] = mapped_column(default=list)
    difficulty: Mapped[str] = mapped_column(String(32), default="standard")
    domain_tags: Mapped[list[Any]] = mapped_column(default=list)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """Machine scores and provenance; for the audit, never shown to the reviewer."""
    status: Mapped[str] = mapped_column(String(16), default=CandidateStatus.PENDING)
    reviewed_by: Mapped[str | None] = mapped_column(String(128))
    reviewed_at: Mapped[datetime | None] = mapped_column()
    review_note: Mapped[str | None] = mapped_column(Text)
    answer_edited: Mapped[bool | None] = mapped_column(Boolean)
    entry_id: Mapped[str | None] = mapped_column(ANSWER_ID, ForeignKey("golden_set_entries.entry_id"))
    """The golden entry an approval inserted."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        Index("ix_golden_candidates_status", "status", "created_at"),
        CheckConstraint(_in("status", CANDIDATE_STATUSES), name="status"),
    )
