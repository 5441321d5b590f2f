"""The API's typed request and response bodies: a schema family per entity (`XCreate` for what a
client sends, `XPublic` for what it gets back). The OpenAPI document generated from these is the
contract; every field has a description or an obvious name and every limit is declared here."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ragloop.improve.payload import StoredTrace
from ragloop.retrieval.collection import NAME_RE
from ragloop.service.improve_schemas import DiagnosisPublic
from ragloop.service.inputs import check_text, display_text
from ragloop.store.vocabulary import EvaluationTier, ReviewFailureMode

SESSION_PATTERN = r"^[A-Za-z0-9_.:@-]{1,100}$"
COLLECTION_PATTERN = NAME_RE.pattern
Issue = Literal["wrong_answer", "missing_context", "wrong_source", "incomplete", "unsupported_claim", "other"]


class RequestModel(BaseModel):
    """The base of every request body: unknown fields refused, surrounding whitespace stripped,
    strict types (`true` is not 1 and `"5"` is not 5), and every field held to the input policy of
    `ragloop.service.inputs` (a 422 naming the field). Checked before stripping, so a control
    character at either end is refused like one in the middle."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _input_policy(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        # nested request models check their own fields (and name them precisely): only look past
        # the strings at this level where no model will
        deep = field is None or not _holds_models(field.annotation)
        return check_text(value, deep=deep)


def _holds_models(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_models(arg) for arg in get_args(annotation))


Shown = Annotated[str, AfterValidator(display_text)]
"""Text shown to a client that may come from a document or a model: bidi controls removed."""


def check_question(text: str) -> str:
    """A question must have at least one letter or digit (`/v1/query` and chat completions alike)."""
    if not any(ch.isalnum() for ch in text):
        raise ValueError("the question has no words")
    return text


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


# --------------------------------------------------------------------------- query


class QueryCreate(RequestModel):
    question: str = Field(min_length=1, max_length=4000, description="The user's question.")

    @field_validator("question")
    @classmethod
    def _has_words(cls, v: str) -> str:
        return check_question(v)

    session_id: str = Field(
        pattern=SESSION_PATTERN,
        description="Conversation id chosen by the client (letters, digits, _ . : @ -; at most 100). "
        "Follow-up questions in the same session are read with the earlier turns.",
    )
    top_k: int | None = Field(default=None, ge=1, le=50, description="Passages to retrieve (default: the pipeline's).")
    collection: str | None = Field(
        default=None, pattern=COLLECTION_PATTERN, description="Collection (default: `default`)."
    )
    stream: bool = Field(default=False, description="Same as `?stream=true`: Server-Sent Events.")


class CitationPublic(_Out):
    n: int = Field(description="The number used in the answer's inline [n] markers.")
    chunk_id: str
    doc_id: str
    title: Shown = ""
    heading_path: list[Shown] = Field(default_factory=list, description="The cited chunk's headings, outermost first.")
    excerpt: Shown = ""
    score: float = 0.0


class QueryPublic(_Out):
    answer_id: str
    session_id: str
    answer: Shown = Field(description="The validated answer with inline [n] citations.")
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
    question: Shown
    created_at: datetime
    trace: StoredTrace = Field(
        description="Every node's decision, typed detail (by node), latency, tokens and cost; the summary; "
        "whether the last good pipeline served it."
    )


class HighlightedPassage(RequestModel):
    text: str = Field(min_length=1, max_length=2000)
    note: str | None = Field(default=None, max_length=2000)


class FeedbackCreate(RequestModel):
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
    evaluation_tier: EvaluationTier
    status: Literal["completed", "failed", "unqualified"]
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
    evaluation_tier: EvaluationTier | None = Field(
        description="The most authoritative completed evaluation's tier (human > llm_judge > heuristic)."
    )
    scores: dict[str, Any] = Field(default_factory=dict)
    heuristic_score: float | None = None
    failure_mode: str | None = None
    failure_evidence: dict[str, Any] = Field(default_factory=dict)
    improvement_actions: list[Any] = Field(default_factory=list)
    evaluations: list[EvaluationPublic]
    jobs: list[EvaluationJobPublic]
    diagnosis: DiagnosisPublic | None = Field(
        default=None, description="Why the answer failed (failure mode, evidence, proposed actions), once diagnosed."
    )


# --------------------------------------------------------------------------- review queue (tier 3)


class ReviewItemPublic(BaseModel):
    job_id: str
    answer_id: str
    reasons: list[str]
    queued_at: datetime
    question: Shown
    answer: Shown
    citations: list[CitationPublic]
    evaluations: list[EvaluationPublic]


class ReviewCreate(RequestModel):
    scores: dict[
        Literal["faithfulness", "answer_relevance", "context_precision", "context_recall"],
        Annotated[float, Field(ge=0.0, le=1.0)],
    ] = Field(default_factory=dict, description="Human scores, each 0 to 1.")
    failure_mode: ReviewFailureMode | None = None
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
    question: Shown
    answer: Shown
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
    parent_version: str | None = None
    created_by: str | None = None
    created_at: datetime | None = None
    promoted_via: str | None = Field(default=None, description="experiment | remediation | admin | regression")
    approvals: list[Any] = Field(default_factory=list)


class RollbackCreate(RequestModel):
    target_version: str | None = Field(default=None, max_length=64, description="Default: the previous version.")
    reason: str = Field(default="manual rollback", min_length=1, max_length=500)


# --------------------------------------------------------------------------- keys


class KeyCreate(RequestModel):
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


# --------------------------------------------------------------------------- call log


class ModelCallPublic(_Out):
    """One logged model call (`model_calls`): prompts and responses included, hence admin only."""

    call_id: str
    answer_id: str | None
    run_id: str | None
    purpose: str = Field(description="answer, heuristic, llm_judge, diagnosis, golden_draft or unattributed.")
    step: str | None = Field(description="The answer-graph node (or diagnosis step) that made the call.")
    model: str
    prompt: list[Any]
    response: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float | None
    cost_usd: float | None = Field(description="USD; null when no price is known for the model; 0 for cache hits.")
    cached: bool
    error: str | None
    created_at: datetime


class ModelCallsPublic(_Out):
    answer_id: str
    calls: list[ModelCallPublic]
    prompt_tokens: int = Field(description="Spent by the calls (cache hits excluded).")
    completion_tokens: int
    cost_usd: float | None = Field(description="Summed over priced calls; null when none is priced.")
