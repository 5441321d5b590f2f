"""The API's bodies for failure diagnosis, the knowledge-gap log and improvement actions (the
`XPublic` family of `schemas.py`, in their own module because they follow the improvement loop's
tables, not the serving path's; `schemas.EvaluationsPublic` embeds `DiagnosisPublic`, so this module
must not import `schemas`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ragloop.service.inputs import display_text

Shown = Annotated[str, AfterValidator(display_text)]
"""Text shown to a client that may come from a user or a document: bidi controls removed (as in `schemas`)."""


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class DiagnosisPublic(_Out):
    """Why an answer failed, with evidence, and what was proposed about it (`ragloop.improve.engine`)."""

    status: str = Field(description="pending | retrying | completed | failed | skipped")
    failure_mode: str | None = Field(default=None, description="The classifier's verdict (completed only).")
    confidence: float | None = None
    failure_evidence: dict[str, Any] = Field(
        default_factory=dict, description="The evidence that decided the mode (chunks, ranks, scores, claims)."
    )
    improvement_actions: list[dict[str, Any]] = Field(
        default_factory=list, description="Proposed actions, with the `action_id` of their `/v1/improvements` row."
    )
    rule: str | None = Field(default=None, description="The path through the decision tree that decided.")
    reasons: list[str] = Field(default_factory=list, description="Why the answer was selected for diagnosis.")
    ideal_source: str | None = Field(default=None, description="correction | reference | judge")
    collection: str | None = None
    pipeline_version: str | None = None
    replayable: bool = Field(default=False, description="The classifier's inputs are stored with the diagnosis.")
    attempts: int = 0
    error: str | None = Field(default=None, description="The last failed attempt's error (or why it was skipped).")
    knowledge_gap_id: str | None = None
    created_at: datetime
    diagnosed_at: datetime | None = None


class KnowledgeGapPublic(_Out):
    gap_id: str
    collection: str
    representative_question: Shown
    count: int = Field(description="Diagnosed answers in the group.")
    questions: list[Shown] = Field(default_factory=list, description="Member questions (capped).")
    answer_ids: list[str] = Field(default_factory=list, description="Example answers (capped).")
    ideal_answers: list[Shown] = Field(
        default_factory=list, description="Corrections and references: what the missing content must say."
    )
    generated_questions: list[Shown] = Field(
        default_factory=list, description="Questions a document filling the gap would answer."
    )
    generated_by: str | None = None
    best_chunk_id: str | None = Field(default=None, description="The best chunk the collection does have.")
    best_score: float | None = Field(default=None, description="Its oracle score (below the oracle threshold).")
    evidence: dict[str, Any] = Field(default_factory=dict)
    status: str
    first_seen_at: datetime
    last_seen_at: datetime


class KnowledgeGapsPublic(BaseModel):
    gaps: list[KnowledgeGapPublic]
    open: int = Field(description="Open groups in all collections.")


class ImprovementActionPublic(_Out):
    action_id: str
    kind: str
    status: str = Field(description="proposed | scheduled | applied | kept | reverted | failed | rejected")
    component: str
    dedupe_key: str
    domain: str | None = None
    answer_ids: list[str] = Field(default_factory=list)
    evidence: dict[str, Any] = Field(default_factory=dict)
    expected_delta: dict[str, Any] | None = None
    actual_delta: dict[str, Any] | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    revert_payload: dict[str, Any] | None = None
    priority: float = 0.0
    attempts: int = 0
    error: str | None = None
    claimed_by: str | None = None
    created_at: datetime
    updated_at: datetime
    applied_at: datetime | None = None
    audit_due_at: datetime | None = None
    audited_at: datetime | None = None
    reverted_at: datetime | None = None


class ImprovementsPublic(BaseModel):
    actions: list[ImprovementActionPublic]
    counts: dict[str, int] = Field(description="All actions by status.")
