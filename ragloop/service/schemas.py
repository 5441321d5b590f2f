"""The API's typed request and response bodies: a schema family per entity (`XCreate` for what a
client sends, `XPublic` for what it gets back). The OpenAPI document generated from these is the
contract; every field has a description or an obvious name and every limit is declared here."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SESSION_PATTERN = r"^[A-Za-z0-9_.:@-]{1,100}$"
FailureMode = Literal[
    "retrieval_failure",
    "chunking_failure",
    "embedding_failure",
    "ranking_failure",
    "generation_failure",
    "knowledge_gap",
]
Issue = Literal["wrong_answer", "missing_context", "wrong_source", "incomplete", "unsupported_claim", "other"]


_SURROGATE = re.compile("[\ud800-\udfff]")


def no_lone_surrogates(value: Any) -> None:
    """JSON may carry `\\ud800`-style escapes that are not Unicode text; such a string cannot be stored
    (or encoded for a model), so it is refused at the door instead of failing later."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise ValueError("text contains invalid Unicode (an unpaired surrogate escape)")
    elif isinstance(value, BaseModel):
        for v in value.__dict__.values():
            no_lone_surrogates(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            no_lone_surrogates(k)
            no_lone_surrogates(v)
    elif isinstance(value, list | tuple):
        for v in value:
            no_lone_surrogates(v)


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    @model_validator(mode="after")
    def _valid_text(self) -> Any:
        no_lone_surrogates(self)
        return self


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


# --------------------------------------------------------------------------- query


class QueryCreate(_In):
    question: str = Field(min_length=1, max_length=4000, description="The user's question.")

    @field_validator("question")
    @classmethod
    def _has_words(cls, v: str) -> str:
        if not any(ch.isalnum() for ch in v):
            raise ValueError("the question has no words")
        return v

    session_id: str = Field(
        pattern=SESSION_PATTERN,
        description="Conversation id chosen by the client (letters, digits, _ . : @ -; at most 100). "
        "Follow-up questions in the same session are read with the earlier turns.",
    )
    top_k: int | None = Field(default=None, ge=1, le=50, description="Passages to retrieve (default: the pipeline's).")
    collection: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="Collection (default: `default`)."
    )
    stream: bool = Field(default=False, description="Same as `?stream=true`: Server-Sent Events.")


class CitationPublic(_Out):
    n: int = Field(description="The number used in the answer's inline [n] markers.")
    chunk_id: str
    doc_id: str
    title: str = ""
    excerpt: str = ""
    score: float = 0.0


class QueryPublic(_Out):
    answer_id: str
    session_id: str
    answer: str = Field(description="The validated answer with inline [n] citations.")
    citations: list[CitationPublic]
    confidence: float = Field(description="The pipeline's quality score for this answer, 0 to 1.")
    refused: bool
    termination_reason: str
    residual_deficiencies: list[str]
    latency_ms: int
    pipeline_version: str
    degraded: bool = Field(
        default=False, description="True when the active pipeline failed and the last good one answered."
    )


# --------------------------------------------------------------------------- answers, feedback, evaluations


class AnswerPublic(QueryPublic):
    question: str
    created_at: datetime
    trace: dict[str, Any] = Field(description="Every node's decision, scores and latency.")


class HighlightedPassage(_In):
    text: str = Field(min_length=1, max_length=2000)
    note: str | None = Field(default=None, max_length=2000)


class FeedbackCreate(_In):
    rating: Literal["positive", "negative"]
    issues: list[Issue] = Field(default_factory=list, max_length=10)
    corrected_answer: str | None = Field(default=None, max_length=10000)
    relevant_doc_ids: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        default_factory=list, max_length=50
    )
    highlighted_passages: list[HighlightedPassage] = Field(default_factory=list, max_length=20)


class FeedbackPublic(_Out):
    feedback_id: str
    improvement_queued: bool = Field(
        description="True when the feedback queued further evaluation (tier-2 judge, tier-3 review)."
    )
    weight: float = Field(description="How much this feedback counts against automatic scores.")


class EvaluationPublic(_Out):
    eval_id: str
    answer_id: str
    evaluation_tier: Literal["heuristic", "llm_judge", "human"]
    status: Literal["completed", "failed"]
    heuristic_score: float | None = None
    scores: dict[str, Any] = Field(default_factory=dict)
    failure_mode: str | None = None
    failure_evidence: dict[str, Any] = Field(default_factory=dict)
    improvement_actions: list[Any] = Field(default_factory=list)
    evaluator_model: str | None = None
    error: str | None = None
    evaluated_at: datetime


class EvaluationJobPublic(_Out):
    tier: str
    status: str
    attempts: int
    max_attempts: int
    last_error: str | None = None
    dead_reason: str | None = None


class EvaluationsPublic(BaseModel):
    answer_id: str
    evaluation_tier: Literal["heuristic", "llm_judge", "human"] | None = Field(
        description="The most authoritative completed evaluation's tier (human > llm_judge > heuristic)."
    )
    scores: dict[str, Any] = Field(default_factory=dict)
    heuristic_score: float | None = None
    failure_mode: str | None = None
    failure_evidence: dict[str, Any] = Field(default_factory=dict)
    improvement_actions: list[Any] = Field(default_factory=list)
    evaluations: list[EvaluationPublic]
    jobs: list[EvaluationJobPublic]


# --------------------------------------------------------------------------- review queue (tier 3)


class ReviewItemPublic(BaseModel):
    job_id: str
    answer_id: str
    reasons: list[str]
    queued_at: datetime
    question: str
    answer: str
    citations: list[CitationPublic]
    evaluations: list[EvaluationPublic]


class ReviewCreate(_In):
    scores: dict[
        Literal["faithfulness", "answer_relevance", "context_precision", "context_recall"],
        Annotated[float, Field(ge=0.0, le=1.0)],
    ] = Field(default_factory=dict, description="Human scores, each 0 to 1.")
    failure_mode: FailureMode | None = None
    labels: list[str] = Field(default_factory=list, max_length=20)
    corrected_answer: str | None = Field(default=None, max_length=10000)
    notes: str | None = Field(default=None, max_length=5000)


# --------------------------------------------------------------------------- conversations


class ConversationSummary(BaseModel):
    session_id: str
    turns: int
    first_at: datetime
    last_at: datetime


class Turn(BaseModel):
    answer_id: str
    question: str
    answer: str
    citations: list[CitationPublic]
    refused: bool
    created_at: datetime


class ConversationPublic(BaseModel):
    session_id: str
    turns: list[Turn]


class Deleted(BaseModel):
    deleted: bool
    answers_deleted: int = 0


# --------------------------------------------------------------------------- documents and jobs


class JobProgress(BaseModel):
    phase: str = ""
    done: int = 0
    total: int = 0
    fraction: float = 0.0


class JobPublic(BaseModel):
    job_id: str
    kind: Literal["ingest", "delete"]
    collection: str
    status: Literal["queued", "running", "succeeded", "failed"]
    documents: list[str]
    progress: JobProgress
    result: dict[str, Any] | None = None
    error: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


# --------------------------------------------------------------------------- pipeline


class PipelinePublic(_Out):
    version: str
    config: dict[str, Any]
    status: str
    description: str | None = None
    promoted_at: datetime | None = None
    promoted_by: str | None = None
    previous_version: str | None = None
    quality_at_promotion: dict[str, Any] = Field(default_factory=dict)


class RollbackCreate(_In):
    target_version: str | None = Field(default=None, max_length=64, description="Default: the previous version.")
    reason: str = Field(default="manual rollback", min_length=1, max_length=500)


# --------------------------------------------------------------------------- keys


class KeyCreate(_In):
    role: Literal["user", "admin"] = "user"
    name: str | None = Field(default=None, max_length=200)
    rate_limit_per_minute: int | None = Field(default=None, ge=1, le=1_000_000)


class KeyPublic(BaseModel):
    key_id: str
    role: str
    name: str | None = None
    rate_limit_per_minute: int | None = None
    created_at: datetime
    revoked_at: datetime | None = None


class KeyIssued(KeyPublic):
    key: str = Field(description="The key itself: shown this once, stored only as a hash.")


# --------------------------------------------------------------------------- health


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    checks: dict[str, str]
