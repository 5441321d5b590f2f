"""The tables of failure diagnosis and remediation: `diagnoses`, `knowledge_gaps`, `improvement_actions`.

Their own module (beside `models`, like `document_models`) because they are the improvement loop's
working state, with lives of their own; they share `Base` and the column conventions of
`ragloop.store.models` (uuid hex ids, UTC timestamps, JSON/JSONB payloads).

Why a `diagnoses` table rather than more columns on `evaluations`: a diagnosis is not one tier's
score of an answer but a verdict over all of them (the correction from feedback, the reference,
the judge's scores), with a life an evaluation row does not have (selected, retried after a
failing model, given up on), and it carries the replayable `DiagnosisInput` (a few kilobytes).
One row per answer; `GET /v1/evaluations/{answer_id}` returns it next to the tier rows.

`improvement_actions` is generic on purpose: every remediation kind (expansion cache entry,
per-document re-chunk, knowledge-gap log entry, ranking buffer, candidates) is one row with a
`payload` that says what apply needs and a `revert_payload` that says how to undo it. The unique
key (kind, component, dedupe_key) is what makes "apply once" enforceable across workers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from ragloop.store.models import ANSWER_ID, SHORT, Base, NullableJSON, _in, new_id, utcnow
from ragloop.store.vocabulary import ActionStatus, DiagnosisStatus, GapStatus

DIAGNOSIS_STATUSES: tuple[DiagnosisStatus, ...] = tuple(DiagnosisStatus)
KNOWLEDGE_GAP_STATUSES: tuple[GapStatus, ...] = tuple(GapStatus)
ACTION_STATUSES: tuple[ActionStatus, ...] = tuple(ActionStatus)
"""proposed → scheduled (claimed by a scheduler) → applied → kept | reverted; scheduled → failed (or back
to proposed for a retry); proposed → rejected (by the scheduler's rules or an admin)."""
ACTION_OPEN: tuple[ActionStatus, ...] = (ActionStatus.PROPOSED, ActionStatus.SCHEDULED)


class DiagnosisRecord(Base):
    """The failure diagnosis of one answer: why it failed, with evidence, and what to do about it."""

    __tablename__ = "diagnoses"

    diagnosis_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    answer_id: Mapped[str] = mapped_column(ANSWER_ID, ForeignKey("answers.answer_id", ondelete="CASCADE"), unique=True)
    status: Mapped[str] = mapped_column(String(16), default=DiagnosisStatus.PENDING)
    reasons: Mapped[list[Any]] = mapped_column(default=list)
    """Why the answer was selected: negative_feedback, correction, low_heuristic_score, judged_wrong."""
    ideal_answer: Mapped[str | None] = mapped_column(Text)
    ideal_source: Mapped[str | None] = mapped_column(String(32))
    """correction | reference | judge: where the ideal answer came from (the order of preference)."""
    collection: Mapped[str | None] = mapped_column(SHORT)
    pipeline_version: Mapped[str | None] = mapped_column(SHORT)
    failure_mode: Mapped[str | None] = mapped_column(SHORT)
    confidence: Mapped[float | None] = mapped_column(Float)
    evidence: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    actions: Mapped[list[Any]] = mapped_column(default=list)
    rule: Mapped[str | None] = mapped_column(String(255))
    diagnosis_input: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    """The stored `DiagnosisInput`: `classify(DiagnosisInput.model_validate(...))` replays the decision."""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    diagnosed_at: Mapped[datetime | None] = mapped_column()

    __table_args__ = (
        Index("ix_diagnoses_status", "status", "updated_at"),
        Index("ix_diagnoses_mode", "failure_mode", "diagnosed_at"),
        CheckConstraint(_in("status", DIAGNOSIS_STATUSES), name="status"),
    )


class KnowledgeGap(Base):
    """A group of similar questions the collection could not answer even with the ideal answer as query."""

    __tablename__ = "knowledge_gaps"

    gap_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    collection: Mapped[str] = mapped_column(SHORT)
    representative_question: Mapped[str] = mapped_column(Text)
    vector: Mapped[list[Any] | None] = mapped_column(NullableJSON)
    """The representative question's embedding (by `embedder`); None when grouped lexically."""
    embedder: Mapped[str | None] = mapped_column(String(200))
    count: Mapped[int] = mapped_column(Integer, default=1)
    questions: Mapped[list[Any]] = mapped_column(default=list)
    """Distinct member questions (capped), oldest first."""
    answer_ids: Mapped[list[Any]] = mapped_column(default=list)
    """Example answers (capped), oldest first."""
    ideal_answers: Mapped[list[Any]] = mapped_column(default=list)
    """The corrections / references the missing content would have to hold (capped)."""
    generated_questions: Mapped[list[Any]] = mapped_column(default=list)
    """The questions the missing content would answer."""
    generated_by: Mapped[str | None] = mapped_column(String(200))
    best_chunk_id: Mapped[str | None] = mapped_column(SHORT)
    best_score: Mapped[float | None] = mapped_column(Float)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(16), default=GapStatus.OPEN)
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        Index("ix_knowledge_gaps_collection", "collection", "status", "last_seen_at"),
        CheckConstraint(_in("status", KNOWLEDGE_GAP_STATUSES), name="status"),
    )


class ImprovementAction(Base):
    """One proposed (and perhaps applied, audited, reverted) remediation."""

    __tablename__ = "improvement_actions"

    action_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    kind: Mapped[str] = mapped_column(String(32))
    """An `ActionKind` value (not constrained here: new kinds need no migration)."""
    status: Mapped[str] = mapped_column(String(16), default=ActionStatus.PROPOSED)
    component: Mapped[str] = mapped_column(String(255))
    """What it changes, for conflict serialisation: `expansion_cache`, `doc:<collection>/<doc_id>`, `pipeline`…"""
    dedupe_key: Mapped[str] = mapped_column(String(255))
    domain: Mapped[str | None] = mapped_column(SHORT)
    """The collection it serves (the scheduler's per-domain daily cap counts by it)."""
    answer_ids: Mapped[list[Any]] = mapped_column(default=list)
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    expected_delta: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    actual_delta: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    revert_payload: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    priority: Mapped[float] = mapped_column(Float, default=0.0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    lease_expires_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    applied_at: Mapped[datetime | None] = mapped_column()
    audit_due_at: Mapped[datetime | None] = mapped_column()
    audited_at: Mapped[datetime | None] = mapped_column()
    reverted_at: Mapped[datetime | None] = mapped_column()

    __table_args__ = (
        UniqueConstraint("kind", "component", "dedupe_key"),
        Index("ix_improvement_actions_due", "status", "priority"),
        Index("ix_improvement_actions_domain", "domain", "status", "applied_at"),
        Index("ix_improvement_actions_audit", "status", "audit_due_at"),
        CheckConstraint(_in("status", ACTION_STATUSES), name="status"),
    )


IMPROVE_TABLE_NAMES = ("diagnoses", "knowledge_gaps", "improvement_actions")
