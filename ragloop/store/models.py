"""The tables of the self-improving service (SQLAlchemy 2 typed ORM).

Conventions:
- ids are uuid4 hex strings (safe in URLs, portable across SQLite and PostgreSQL); pipeline
  versions are keyed by their config hash (`pv-…`), API keys by their public prefix;
- timestamps are timezone-aware UTC on the way in and on the way out (`UTCDateTime`);
- variable-shape payloads (traces, scores, evidence, configs, lists) are JSON, JSONB on PostgreSQL;
- tiers, job and evaluation statuses and failure modes are the `StrEnum`s of `ragloop.store.vocabulary`
  (the CHECK constraints below list their values);
- the migrations in `ragloop.store.migrations` create these tables; a test checks that the migrated
  schema and this module agree, so a column added here without a migration fails the suite.

Two tables are append-only by design and the database enforces it (triggers created by the
migration): `improvement_audit_log` refuses every UPDATE and DELETE, and `golden_set_entries`
refuses every change except deprecating a live row (setting `deprecated_at`, `superseded_by`).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from ragloop.config.clock import process_clock
from ragloop.store.vocabulary import EVALUATION_TIERS, EvaluationStatus, JobStatus

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JSONType: TypeEngine[Any] = JSON().with_variant(JSONB(), "postgresql")
# nullable JSON: Python None is SQL NULL, not the JSON literal null
NullableJSON: TypeEngine[Any] = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

ANSWER_ID = String(32)
SHORT = String(64)

JOB_STATUSES: tuple[str, ...] = tuple(s.value for s in JobStatus)
EVALUATION_STATUSES: tuple[str, ...] = tuple(s.value for s in EvaluationStatus)
PIPELINE_STATUSES = ("active", "candidate", "retired")
API_KEY_ROLES = ("user", "admin")
RATINGS = ("positive", "negative")


def new_id() -> str:
    """A uuid4 as 32 hex characters."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    """Now on the process clock (`RAGLOOP_CLOCK`, the system's by default): every stamp the loop reads."""
    return process_clock().now()


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both backends.

    PostgreSQL stores `timestamptz`; SQLite stores the UTC wall time as text (fixed width, so it
    sorts and compares correctly). Naive datetimes are refused rather than guessed at.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: ragloop stores timezone-aware UTC timestamps")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(str(v)) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSONType,
        list[Any]: JSONType,
    }


class Query(Base):
    """One question as served: who asked, which pipeline (and experiment arm) answered, what it retrieved."""

    __tablename__ = "queries"

    query_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    session_id: Mapped[str] = mapped_column(String(128), index=True)
    user_id: Mapped[str | None] = mapped_column(SHORT)
    question_text: Mapped[str] = mapped_column(Text)
    question_hash: Mapped[str] = mapped_column(SHORT, index=True)
    answer_id: Mapped[str | None] = mapped_column(ANSWER_ID)  # set with the answer (no FK: answers → queries)
    experiment_id: Mapped[str | None] = mapped_column(
        ANSWER_ID, ForeignKey("experiments.experiment_id", ondelete="SET NULL")
    )
    variant: Mapped[str | None] = mapped_column(String(16))
    pipeline_version: Mapped[str] = mapped_column(SHORT)
    retrieved_chunk_ids: Mapped[list[Any]] = mapped_column(default=list)
    retrieval_scores: Mapped[list[Any]] = mapped_column(default=list)
    latency_ms: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)

    __table_args__ = (Index("ix_queries_experiment", "experiment_id", "variant", "created_at"),)


class Answer(Base):
    """The answer to one query, with its citations and the full node trace."""

    __tablename__ = "answers"

    answer_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    query_id: Mapped[str] = mapped_column(ANSWER_ID, ForeignKey("queries.query_id", ondelete="CASCADE"), index=True)
    session_id: Mapped[str] = mapped_column(String(128), index=True)
    answer_text: Mapped[str] = mapped_column(Text)
    answer_hash: Mapped[str] = mapped_column(SHORT)
    citations: Mapped[list[Any]] = mapped_column(default=list)
    citation_count: Mapped[int] = mapped_column(Integer, default=0)
    token_count: Mapped[int | None] = mapped_column(Integer)
    confidence: Mapped[float | None] = mapped_column(Float)
    refused: Mapped[bool] = mapped_column(Boolean, default=False)
    termination_reason: Mapped[str | None] = mapped_column(SHORT)
    residual_deficiencies: Mapped[list[Any]] = mapped_column(default=list)
    trace: Mapped[dict[str, Any]] = mapped_column(default=dict)
    pipeline_version: Mapped[str] = mapped_column(SHORT)
    latency_ms: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Evaluation(Base):
    """One evaluation of one answer by one tier.

    `status='failed'` records a judge that gave up: an answer is never silently left unevaluated."""

    __tablename__ = "evaluations"

    eval_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    answer_id: Mapped[str] = mapped_column(ANSWER_ID, ForeignKey("answers.answer_id", ondelete="CASCADE"), index=True)
    evaluation_tier: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default=EvaluationStatus.COMPLETED)
    faithfulness: Mapped[float | None] = mapped_column(Float)
    answer_relevance: Mapped[float | None] = mapped_column(Float)
    context_precision: Mapped[float | None] = mapped_column(Float)
    context_recall: Mapped[float | None] = mapped_column(Float)
    heuristic_score: Mapped[float | None] = mapped_column(Float)
    scores: Mapped[dict[str, Any]] = mapped_column(default=dict)
    failure_mode: Mapped[str | None] = mapped_column(SHORT)
    failure_evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    oracle_chunk_ids: Mapped[list[Any]] = mapped_column(default=list)
    improvement_actions: Mapped[list[Any]] = mapped_column(default=list)
    evaluator_model: Mapped[str | None] = mapped_column(String(128))
    evaluator_version: Mapped[str | None] = mapped_column(String(64))
    """Tier 2: the judge's pinned version (with `evaluator_model` and the prompt hash: the judge)."""
    evaluator_prompt_sha: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    evaluated_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        Index("ix_evaluations_failure", "failure_mode", "evaluated_at"),
        Index("ix_evaluations_tier_score", "evaluation_tier", "heuristic_score"),
        CheckConstraint(_in("evaluation_tier", EVALUATION_TIERS), name="tier"),
        CheckConstraint(_in("status", EVALUATION_STATUSES), name="status"),
    )


class UserFeedback(Base):
    """Explicit feedback on an answer; `weight` makes it count more than automatic scores."""

    __tablename__ = "user_feedback"

    feedback_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    answer_id: Mapped[str] = mapped_column(ANSWER_ID, ForeignKey("answers.answer_id", ondelete="CASCADE"), index=True)
    user_id: Mapped[str | None] = mapped_column(SHORT)
    rating: Mapped[str] = mapped_column(String(16))
    issues: Mapped[list[Any]] = mapped_column(default=list)
    corrected_answer: Mapped[str | None] = mapped_column(Text)
    relevant_doc_ids: Mapped[list[Any]] = mapped_column(default=list)
    highlighted_passages: Mapped[list[Any]] = mapped_column(default=list)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (CheckConstraint(_in("rating", RATINGS), name="rating"),)


class GoldenSetEntry(Base):
    """One version of one golden question. Revisions insert a new row with the same `lineage_id`
    and a higher `version`, and deprecate the old row; rows are never edited or deleted."""

    __tablename__ = "golden_set_entries"

    entry_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    lineage_id: Mapped[str] = mapped_column(ANSWER_ID, index=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    question: Mapped[str] = mapped_column(Text)
    expected_answer: Mapped[str] = mapped_column(Text)
    required_chunk_ids: Mapped[list[Any]] = mapped_column(default=list)
    required_doc_ids: Mapped[list[Any]] = mapped_column(default=list, server_default=text("'[]'"))
    source: Mapped[str] = mapped_column(String(32))
    difficulty: Mapped[str] = mapped_column(String(32), default="standard")
    domain_tags: Mapped[list[Any]] = mapped_column(default=list)
    held_out: Mapped[bool] = mapped_column(Boolean, default=False)
    created_by: Mapped[str] = mapped_column(String(128))
    approved_at: Mapped[datetime | None] = mapped_column()
    deprecated_at: Mapped[datetime | None] = mapped_column()
    superseded_by: Mapped[str | None] = mapped_column(ANSWER_ID, ForeignKey("golden_set_entries.entry_id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    added_in: Mapped[int | None] = mapped_column(Integer, index=True)
    """The golden-set version (`golden_set_versions.version`) whose change inserted this row."""
    deprecated_in: Mapped[int | None] = mapped_column(Integer)
    """The golden-set version that deprecated it (set with `deprecated_at`); None while live."""

    __table_args__ = (UniqueConstraint("lineage_id", "version"),)


class RegressionRun(Base):
    """One run of the pipeline over the golden set, compared with the baseline."""

    __tablename__ = "regression_runs"

    run_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    golden_set_version: Mapped[int] = mapped_column(Integer)
    pipeline_version: Mapped[str] = mapped_column(SHORT, index=True)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column()
    faithfulness_mean: Mapped[float | None] = mapped_column(Float)
    answer_relevance_mean: Mapped[float | None] = mapped_column(Float)
    context_precision_mean: Mapped[float | None] = mapped_column(Float)
    context_recall_mean: Mapped[float | None] = mapped_column(Float)
    baseline_faithfulness: Mapped[float | None] = mapped_column(Float)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    baseline: Mapped[dict[str, Any]] = mapped_column(default=dict)
    regression_detected: Mapped[bool] = mapped_column(Boolean, default=False)
    rollback_triggered: Mapped[bool] = mapped_column(Boolean, default=False)
    run_status: Mapped[str] = mapped_column(String(16), default="running")
    report: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Experiment(Base):
    """An A/B test of two pipeline configurations."""

    __tablename__ = "experiments"

    experiment_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    control_config: Mapped[dict[str, Any]] = mapped_column()
    treatment_config: Mapped[dict[str, Any]] = mapped_column()
    control_version: Mapped[str | None] = mapped_column(SHORT)
    treatment_version: Mapped[str | None] = mapped_column(SHORT)
    traffic_split: Mapped[float] = mapped_column(Float, default=0.05)
    min_sample_size: Mapped[int] = mapped_column(Integer, default=500)
    primary_metric: Mapped[str] = mapped_column(SHORT)
    guardrail_metrics: Mapped[list[Any]] = mapped_column(default=list)
    status: Mapped[str] = mapped_column(String(32), default="running", index=True)
    p_value: Mapped[float | None] = mapped_column(Float)
    control_sample: Mapped[int] = mapped_column(Integer, default=0)
    treatment_sample: Mapped[int] = mapped_column(Integer, default=0)
    recommendation: Mapped[str | None] = mapped_column(String(32))
    results: Mapped[dict[str, Any]] = mapped_column(default=dict)
    auto_promote_at: Mapped[datetime | None] = mapped_column()
    promoted_at: Mapped[datetime | None] = mapped_column()
    min_duration_s: Mapped[float] = mapped_column(Float, default=86400.0, server_default=text("86400"))
    min_effect: Mapped[float] = mapped_column(Float, default=0.02, server_default=text("0.02"))
    started_at: Mapped[datetime | None] = mapped_column()
    ended_at: Mapped[datetime | None] = mapped_column()
    created_by: Mapped[str | None] = mapped_column(String(128))
    status_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        # one experiment runs at a time (a session's variant is a function of one experiment): the
        # database says so, so two servers starting one each cannot both succeed
        Index(
            "uq_experiments_one_running",
            "status",
            unique=True,
            sqlite_where=text("status = 'running'"),
            postgresql_where=text("status = 'running'"),
        ),
    )


class PipelineVersion(Base):
    """A stored pipeline configuration. Exactly one row is `active` (a partial unique index says so)."""

    __tablename__ = "pipeline_versions"

    version_id: Mapped[str] = mapped_column(SHORT, primary_key=True)
    config: Mapped[dict[str, Any]] = mapped_column()
    description: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="candidate")
    previous_version_id: Mapped[str | None] = mapped_column(SHORT, ForeignKey("pipeline_versions.version_id"))
    promoted_by: Mapped[str | None] = mapped_column(String(128))
    quality_at_promotion: Mapped[dict[str, Any]] = mapped_column(default=dict)
    parent_version_id: Mapped[str | None] = mapped_column(SHORT)
    """The version a candidate was derived from (its overrides apply to this one's config)."""
    created_by: Mapped[str | None] = mapped_column(String(128))
    promoted_via: Mapped[str | None] = mapped_column(String(16))
    """What moved the pointer here last: experiment | remediation | admin | regression | startup."""
    approvals: Mapped[list[Any]] = mapped_column(default=list, server_default=text("'[]'"))
    """Human approval checkpoints: `{actor, at, note}` each."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    activated_at: Mapped[datetime | None] = mapped_column()
    retired_at: Mapped[datetime | None] = mapped_column()

    __table_args__ = (
        CheckConstraint(_in("status", PIPELINE_STATUSES), name="status"),
        Index(
            "uq_pipeline_versions_one_active",
            "status",
            unique=True,
            sqlite_where=text("status = 'active'"),
            postgresql_where=text("status = 'active'"),
        ),
    )


class ImprovementAuditLog(Base):
    """Every automated (or admin) change to the pipeline, with its evidence. INSERT-only in the database:
    a later measurement of a change is a new row whose `refers_to` names the change."""

    __tablename__ = "improvement_audit_log"

    log_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    action_type: Mapped[str] = mapped_column(SHORT, index=True)
    triggered_by: Mapped[str] = mapped_column(String(200))
    actor: Mapped[str] = mapped_column(String(128), default="system")
    evidence: Mapped[dict[str, Any]] = mapped_column()
    pipeline_version_before: Mapped[str | None] = mapped_column(SHORT)
    pipeline_version_after: Mapped[str | None] = mapped_column(SHORT)
    expected_delta: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    actual_delta: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    refers_to: Mapped[str | None] = mapped_column(ANSWER_ID, ForeignKey("improvement_audit_log.log_id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class ModelCall(Base):
    """One call to a model (chat, judge, scorer): the raw material of the improvement loop, and the
    only call log and usage ledger (`ragloop.models.chat.calllog.Logged` writes it). `purpose` is a
    `ragloop.models.chat.CallPurpose`; `step` the answer-graph node that made the call; `answer_id` the answer it served
    (an answer's own calls are written with `run_id` = the answer id before the answer exists, and
    linked in the transaction that stores it)."""

    __tablename__ = "model_calls"

    call_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    answer_id: Mapped[str | None] = mapped_column(
        ANSWER_ID, ForeignKey("answers.answer_id", ondelete="SET NULL"), index=True
    )
    run_id: Mapped[str | None] = mapped_column(SHORT, index=True)
    purpose: Mapped[str] = mapped_column(SHORT)
    model: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[list[Any]] = mapped_column(default=list)
    response: Mapped[str | None] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    cost_usd: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    cached: Mapped[bool] = mapped_column(Boolean, default=False)
    step: Mapped[str | None] = mapped_column(SHORT)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class ApiKey(Base):
    """An API key, stored as its public prefix (`key_id`) and the sha256 of the whole key."""

    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    key_hash: Mapped[str] = mapped_column(SHORT)
    role: Mapped[str] = mapped_column(String(16))
    name: Mapped[str | None] = mapped_column(String(200))
    rate_limit_per_minute: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column()
    last_used_at: Mapped[datetime | None] = mapped_column()

    __table_args__ = (CheckConstraint(_in("role", API_KEY_ROLES), name="role"),)


class EvaluationJob(Base):
    """A durable evaluation job: one per (answer, tier). See `ragloop.store.queue`."""

    __tablename__ = "evaluation_jobs"

    job_id: Mapped[str] = mapped_column(ANSWER_ID, primary_key=True, default=new_id)
    answer_id: Mapped[str] = mapped_column(ANSWER_ID, ForeignKey("answers.answer_id", ondelete="CASCADE"))
    tier: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=5)
    available_at: Mapped[datetime] = mapped_column(default=utcnow)
    leased_by: Mapped[str | None] = mapped_column(String(128))
    lease_token: Mapped[str | None] = mapped_column(ANSWER_ID)
    lease_expires_at: Mapped[datetime | None] = mapped_column()
    last_error: Mapped[str | None] = mapped_column(Text)
    dead_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column()

    __table_args__ = (
        UniqueConstraint("answer_id", "tier"),
        Index("ix_evaluation_jobs_due", "status", "available_at"),
        Index("ix_evaluation_jobs_lease", "status", "lease_expires_at"),
        CheckConstraint(_in("status", JOB_STATUSES), name="status"),
    )


class ServiceSetting(Base):
    """A setting an admin changes at run time (API or CLI), shared by every server and CLI on this
    database: one JSON value per key (`ragloop.store.repositories.settings`). Environment variables
    stay the defaults; a stored setting overrides them (e.g. the regression alert webhook)."""

    __tablename__ = "service_settings"

    key: Mapped[str] = mapped_column(SHORT, primary_key=True)
    value: Mapped[dict[str, Any]] = mapped_column()
    updated_by: Mapped[str] = mapped_column(String(128), default="system")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


TABLE_NAMES = (
    "queries",
    "answers",
    "evaluations",
    "user_feedback",
    "golden_set_entries",
    "golden_set_versions",
    "golden_candidates",
    "regression_runs",
    "experiments",
    "pipeline_versions",
    "improvement_audit_log",
    "model_calls",
    "api_keys",
    "evaluation_jobs",
    "document_jobs",
    "diagnoses",
    "knowledge_gaps",
    "improvement_actions",
    "service_settings",
)
