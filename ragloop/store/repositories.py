"""Typed repositories, one per entity. Every method is one transaction, or joins the caller's
(`Database.transaction()`), and returns rows detached from their session: plain data to read.

Rules the database enforces, and the methods here respect:
- the audit log is insert-only (a later measurement is a new row that `refers_to` the change);
- golden-set entries change by insert + deprecate (`revise_golden_entry`), never in place;
- exactly one pipeline version is active; `activate` and `rollback` switch it atomically and audit it;
- API keys are stored as prefix + sha256; the plain key exists only in `create_api_key`'s return value.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, or_, select, text, update
from sqlalchemy.orm import Session

from ragloop.config.pipeline import PipelineConfig
from ragloop.store.db import Database
from ragloop.store.models import (
    API_KEY_ROLES,
    EVALUATION_TIERS,
    RATINGS,
    Answer,
    ApiKey,
    Evaluation,
    Experiment,
    GoldenSetEntry,
    ImprovementAuditLog,
    ModelCall,
    PipelineVersion,
    Query,
    RegressionRun,
    UserFeedback,
    new_id,
    utcnow,
)

METRICS = ("faithfulness", "answer_relevance", "context_precision", "context_recall")


class NotFoundError(LookupError):
    """The row a call names does not exist."""


class StoreConflictError(ValueError):
    """The call contradicts the stored state (revising a deprecated entry, nothing to roll back to…)."""


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def question_hash(question: str) -> str:
    """SHA-256 of the question with case and whitespace normalised: groups repeats of one question."""
    return _sha256(" ".join(question.lower().split()))


def _serialize(session: Session, name: str) -> None:
    """Serialise writers of one kind: a transaction-scoped advisory lock on PostgreSQL. On SQLite
    write transactions already hold the database write lock (BEGIN IMMEDIATE)."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


# --------------------------------------------------------------------------- queries and answers


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    turns: int
    first_at: datetime
    last_at: datetime


class QueryLog:
    """`queries` and `answers` (one answer per query, written together)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record_answer(
        self,
        *,
        session_id: str,
        question: str,
        answer_text: str,
        pipeline_version: str,
        citations: Sequence[Mapping[str, Any]] = (),
        confidence: float | None = None,
        refused: bool = False,
        termination_reason: str | None = None,
        residual_deficiencies: Sequence[Any] = (),
        trace: Mapping[str, Any] | None = None,
        latency_ms: int | None = None,
        token_count: int | None = None,
        retrieved_chunk_ids: Sequence[str] = (),
        retrieval_scores: Sequence[float] = (),
        user_id: str | None = None,
        experiment_id: str | None = None,
        variant: str | None = None,
        answer_id: str | None = None,
    ) -> Answer:
        """Store one served question and its answer; returns the answer (its `query_id` names the query)."""
        query_id, answer_id = new_id(), answer_id or new_id()
        now = utcnow()
        with self.db.transaction() as s:
            s.add(
                Query(
                    query_id=query_id,
                    session_id=session_id,
                    user_id=user_id,
                    question_text=question,
                    question_hash=question_hash(question),
                    answer_id=answer_id,
                    experiment_id=experiment_id,
                    variant=variant,
                    pipeline_version=pipeline_version,
                    retrieved_chunk_ids=list(retrieved_chunk_ids),
                    retrieval_scores=[float(x) for x in retrieval_scores],
                    latency_ms=latency_ms,
                    created_at=now,
                )
            )
            s.flush()
            answer = Answer(
                answer_id=answer_id,
                query_id=query_id,
                session_id=session_id,
                answer_text=answer_text,
                answer_hash=_sha256(answer_text),
                citations=[dict(c) for c in citations],
                citation_count=len(citations),
                token_count=token_count,
                confidence=confidence,
                refused=refused,
                termination_reason=termination_reason,
                residual_deficiencies=list(residual_deficiencies),
                trace=dict(trace or {}),
                pipeline_version=pipeline_version,
                latency_ms=latency_ms,
                created_at=now,
            )
            s.add(answer)
            s.flush()
            return answer

    def get_answer(self, answer_id: str) -> Answer | None:
        with self.db.transaction(write=False) as s:
            return s.get(Answer, answer_id)

    def get_query(self, query_id: str) -> Query | None:
        with self.db.transaction(write=False) as s:
            return s.get(Query, query_id)

    def query_for_answer(self, answer_id: str) -> Query | None:
        with self.db.transaction(write=False) as s:
            return s.scalar(
                select(Query).join(Answer, Answer.query_id == Query.query_id).where(Answer.answer_id == answer_id)
            )

    def session_answers(self, session_id: str) -> list[Answer]:
        """A conversation's answers, oldest first."""
        with self.db.transaction(write=False) as s:
            stmt = select(Answer).where(Answer.session_id == session_id).order_by(Answer.created_at, Answer.answer_id)
            return list(s.scalars(stmt))

    def list_sessions(self, *, user_id: str | None = None, limit: int = 50, offset: int = 0) -> list[SessionSummary]:
        """Conversations, most recently active first."""
        stmt = select(Query.session_id, func.count(), func.min(Query.created_at), func.max(Query.created_at)).group_by(
            Query.session_id
        )
        if user_id is not None:
            stmt = stmt.where(Query.user_id == user_id)
        stmt = stmt.order_by(func.max(Query.created_at).desc(), Query.session_id).limit(limit).offset(offset)
        with self.db.transaction(write=False) as s:
            rows = s.execute(stmt).all()
        return [SessionSummary(r[0], int(r[1]), r[2], r[3]) for r in rows]

    def delete_session(self, session_id: str) -> int:
        """Delete a conversation's queries and answers; their evaluations, feedback and evaluation jobs go
        with them (ON DELETE CASCADE) and their model calls are kept, detached. Returns the number of
        answers deleted. Golden-set entries and the audit log are never touched."""
        with self.db.transaction() as s:
            n = s.scalar(select(func.count()).select_from(Answer).where(Answer.session_id == session_id)) or 0
            s.execute(delete(Query).where(Query.session_id == session_id))
            return int(n)


# --------------------------------------------------------------------------- evaluations and feedback


class Evaluations:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(
        self,
        answer_id: str,
        tier: str,
        *,
        scores: Mapping[str, float | None] | None = None,
        heuristic_score: float | None = None,
        failure_mode: str | None = None,
        failure_evidence: Mapping[str, Any] | None = None,
        oracle_chunk_ids: Sequence[str] = (),
        improvement_actions: Sequence[Mapping[str, Any]] = (),
        evaluator_model: str | None = None,
        status: str = "completed",
        error: str | None = None,
    ) -> Evaluation:
        """Record one evaluation. `tier` is heuristic | llm_judge | human; `status='failed'` (with `error`)
        records a judge that gave up, so no answer silently goes unevaluated. The four named metrics in
        `scores` also fill their own columns (for indexing and aggregation)."""
        if tier not in EVALUATION_TIERS:
            raise ValueError(f"unknown evaluation tier {tier!r}; expected one of {EVALUATION_TIERS}")
        if status not in ("completed", "failed"):
            raise ValueError(f"evaluation status must be 'completed' or 'failed', got {status!r}")
        score_map = dict(scores or {})
        with self.db.transaction() as s:
            _require(s, Answer, answer_id)
            row = Evaluation(
                answer_id=answer_id,
                evaluation_tier=tier,
                status=status,
                heuristic_score=heuristic_score,
                scores=score_map,
                failure_mode=failure_mode,
                failure_evidence=dict(failure_evidence or {}),
                oracle_chunk_ids=list(oracle_chunk_ids),
                improvement_actions=[dict(a) for a in improvement_actions],
                evaluator_model=evaluator_model,
                error=error,
                **{m: score_map.get(m) for m in METRICS},
            )
            s.add(row)
            s.flush()
            return row

    def for_answer(self, answer_id: str) -> list[Evaluation]:
        """Oldest first."""
        with self.db.transaction(write=False) as s:
            stmt = select(Evaluation).where(Evaluation.answer_id == answer_id)
            return list(s.scalars(stmt.order_by(Evaluation.evaluated_at, Evaluation.eval_id)))

    def latest(self, answer_id: str, tier: str | None = None) -> Evaluation | None:
        stmt = select(Evaluation).where(Evaluation.answer_id == answer_id)
        if tier is not None:
            stmt = stmt.where(Evaluation.evaluation_tier == tier)
        with self.db.transaction(write=False) as s:
            return s.scalar(stmt.order_by(Evaluation.evaluated_at.desc(), Evaluation.eval_id.desc()).limit(1))

    def recent(
        self,
        *,
        tier: str | None = None,
        failure_mode: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[Evaluation]:
        """Newest first."""
        stmt = select(Evaluation)
        if tier is not None:
            stmt = stmt.where(Evaluation.evaluation_tier == tier)
        if failure_mode is not None:
            stmt = stmt.where(Evaluation.failure_mode == failure_mode)
        if since is not None:
            stmt = stmt.where(Evaluation.evaluated_at >= since)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(Evaluation.evaluated_at.desc(), Evaluation.eval_id).limit(limit)))


def feedback_weight(
    *, corrected_answer: str | None, relevant_doc_ids: Sequence[str], highlighted_passages: Sequence[Any]
) -> float:
    """Explicit feedback counts more than an automatic score (weight 1.0 vs the judge's implicit 1.0 per
    evaluation would be a tie, so a rating alone is 2.0); each kind of detail adds 1.0."""
    detail = sum(bool(x) for x in (corrected_answer, relevant_doc_ids, highlighted_passages))
    return 2.0 + detail


class Feedback:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(
        self,
        answer_id: str,
        rating: str,
        *,
        issues: Sequence[str] = (),
        corrected_answer: str | None = None,
        relevant_doc_ids: Sequence[str] = (),
        highlighted_passages: Sequence[Any] = (),
        user_id: str | None = None,
        weight: float | None = None,
    ) -> UserFeedback:
        """Record feedback on an answer (raises NotFoundError for an unknown answer). `weight` defaults to
        `feedback_weight(...)`."""
        if rating not in RATINGS:
            raise ValueError(f"rating must be one of {RATINGS}, got {rating!r}")
        if weight is None:
            weight = feedback_weight(
                corrected_answer=corrected_answer,
                relevant_doc_ids=relevant_doc_ids,
                highlighted_passages=highlighted_passages,
            )
        with self.db.transaction() as s:
            _require(s, Answer, answer_id)
            row = UserFeedback(
                answer_id=answer_id,
                user_id=user_id,
                rating=rating,
                issues=list(issues),
                corrected_answer=corrected_answer,
                relevant_doc_ids=list(relevant_doc_ids),
                highlighted_passages=list(highlighted_passages),
                weight=weight,
            )
            s.add(row)
            s.flush()
            return row

    def for_answer(self, answer_id: str) -> list[UserFeedback]:
        with self.db.transaction(write=False) as s:
            stmt = select(UserFeedback).where(UserFeedback.answer_id == answer_id)
            return list(s.scalars(stmt.order_by(UserFeedback.created_at, UserFeedback.feedback_id)))

    def recent(
        self, *, rating: str | None = None, since: datetime | None = None, limit: int = 100
    ) -> list[UserFeedback]:
        stmt = select(UserFeedback)
        if rating is not None:
            stmt = stmt.where(UserFeedback.rating == rating)
        if since is not None:
            stmt = stmt.where(UserFeedback.created_at >= since)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(UserFeedback.created_at.desc(), UserFeedback.feedback_id).limit(limit)))


def _require(session: Session, model: type[Any], key: str) -> Any:
    row = session.get(model, key)
    if row is None:
        raise NotFoundError(f"no {model.__tablename__} row {key!r}")
    return row


# --------------------------------------------------------------------------- golden set

_UNSET: Any = object()


class GoldenSet:
    """Versioned golden questions: insert + deprecate, never update in place (a trigger enforces it).

    Each question has a `lineage_id` (its first version's `entry_id`); a revision inserts version n+1
    and marks version n `deprecated_at` / `superseded_by`. The golden-set version number
    (`golden_set_version()`) counts every insert and every deprecation, so it only grows, and
    `golden_set_as_of(t)` rebuilds the set any regression run saw.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def add_golden_entry(
        self,
        question: str,
        expected_answer: str,
        *,
        source: str,
        created_by: str,
        required_chunk_ids: Sequence[str] = (),
        difficulty: str = "standard",
        domain_tags: Sequence[str] = (),
        held_out: bool = False,
        approved_at: datetime | None = None,
    ) -> GoldenSetEntry:
        """A new question (version 1). `source` is human | auto_promoted | adversarial; `approved_at` is
        the human approval (auto-nominated entries should only be added once approved)."""
        entry_id = new_id()
        with self.db.transaction() as s:
            row = GoldenSetEntry(
                entry_id=entry_id,
                lineage_id=entry_id,
                version=1,
                question=question,
                expected_answer=expected_answer,
                required_chunk_ids=list(required_chunk_ids),
                source=source,
                difficulty=difficulty,
                domain_tags=list(domain_tags),
                held_out=held_out,
                created_by=created_by,
                approved_at=approved_at,
            )
            s.add(row)
            s.flush()
            return row

    def revise_golden_entry(
        self,
        old_id: str,
        *,
        created_by: str,
        question: str | None = None,
        expected_answer: str | None = None,
        required_chunk_ids: Sequence[str] | None = None,
        difficulty: str | None = None,
        domain_tags: Sequence[str] | None = None,
        held_out: bool | None = None,
        source: str | None = None,
        approved_at: datetime | None = None,
    ) -> GoldenSetEntry:
        """Insert the next version of `old_id` (fields not given are copied) and deprecate `old_id`,
        in one transaction. The new version is unapproved unless `approved_at` is given: an approval
        covers the text that was approved. Raises StoreConflictError if `old_id` is already deprecated."""
        with self.db.transaction() as s:
            old = s.scalar(select(GoldenSetEntry).where(GoldenSetEntry.entry_id == old_id).with_for_update())
            if old is None:
                raise NotFoundError(f"no golden_set_entries row {old_id!r}")
            if old.deprecated_at is not None:
                raise StoreConflictError(
                    f"golden entry {old_id} was deprecated at {old.deprecated_at.isoformat()}"
                    + (f" (superseded by {old.superseded_by})" if old.superseded_by else "")
                    + ": revise the current version"
                )
            new = GoldenSetEntry(
                entry_id=new_id(),
                lineage_id=old.lineage_id,
                version=old.version + 1,
                question=old.question if question is None else question,
                expected_answer=old.expected_answer if expected_answer is None else expected_answer,
                required_chunk_ids=list(old.required_chunk_ids if required_chunk_ids is None else required_chunk_ids),
                source=old.source if source is None else source,
                difficulty=old.difficulty if difficulty is None else difficulty,
                domain_tags=list(old.domain_tags if domain_tags is None else domain_tags),
                held_out=old.held_out if held_out is None else held_out,
                created_by=created_by,
                approved_at=approved_at,
            )
            s.add(new)
            s.flush()  # the new row must exist before the old one points at it
            old.deprecated_at = new.created_at
            old.superseded_by = new.entry_id
            s.flush()
            return new

    def deprecate_golden_entry(self, entry_id: str) -> GoldenSetEntry:
        """Retire a question without a successor (the golden-set form of a delete)."""
        with self.db.transaction() as s:
            row = s.scalar(select(GoldenSetEntry).where(GoldenSetEntry.entry_id == entry_id).with_for_update())
            if row is None:
                raise NotFoundError(f"no golden_set_entries row {entry_id!r}")
            if row.deprecated_at is not None:
                raise StoreConflictError(f"golden entry {entry_id} is already deprecated")
            row.deprecated_at = utcnow()
            s.flush()
            return row

    def get(self, entry_id: str) -> GoldenSetEntry | None:
        with self.db.transaction(write=False) as s:
            return s.get(GoldenSetEntry, entry_id)

    def current_golden_set(self, *, include_held_out: bool = True, approved_only: bool = False) -> list[GoldenSetEntry]:
        """The live version of every question, oldest question first. Nightly regressions pass
        `include_held_out=False` (the held-out share is for out-of-sample checks only)."""
        stmt = select(GoldenSetEntry).where(GoldenSetEntry.deprecated_at.is_(None))
        if not include_held_out:
            stmt = stmt.where(GoldenSetEntry.held_out.is_(False))
        if approved_only:
            stmt = stmt.where(GoldenSetEntry.approved_at.is_not(None))
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(GoldenSetEntry.created_at, GoldenSetEntry.entry_id)))

    def golden_set_as_of(self, when: datetime) -> list[GoldenSetEntry]:
        """The golden set as it stood at `when` (for re-running or explaining an old regression run)."""
        stmt = select(GoldenSetEntry).where(
            GoldenSetEntry.created_at <= when,
            or_(GoldenSetEntry.deprecated_at.is_(None), GoldenSetEntry.deprecated_at > when),
        )
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(GoldenSetEntry.created_at, GoldenSetEntry.entry_id)))

    def history(self, lineage_id: str) -> list[GoldenSetEntry]:
        """Every version of one question, version 1 first."""
        with self.db.transaction(write=False) as s:
            stmt = select(GoldenSetEntry).where(GoldenSetEntry.lineage_id == lineage_id)
            return list(s.scalars(stmt.order_by(GoldenSetEntry.version)))

    def golden_set_version(self) -> int:
        """A number that grows with every change to the golden set (inserts + deprecations)."""
        with self.db.transaction(write=False) as s:
            row = s.execute(select(func.count(), func.count(GoldenSetEntry.deprecated_at))).one()
            return int(row[0]) + int(row[1])


# --------------------------------------------------------------------------- audit log


class AuditLog:
    """The improvement audit log: INSERT-only in the database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self,
        action_type: str,
        *,
        triggered_by: str,
        evidence: Mapping[str, Any],
        actor: str = "system",
        pipeline_version_before: str | None = None,
        pipeline_version_after: str | None = None,
        expected_delta: Mapping[str, Any] | None = None,
        actual_delta: Mapping[str, Any] | None = None,
        refers_to: str | None = None,
    ) -> ImprovementAuditLog:
        """Append one entry. A post-change measurement is its own entry with `refers_to` = the change."""
        with self.db.transaction() as s:
            row = ImprovementAuditLog(
                action_type=action_type,
                triggered_by=triggered_by,
                actor=actor,
                evidence=dict(evidence),
                pipeline_version_before=pipeline_version_before,
                pipeline_version_after=pipeline_version_after,
                expected_delta=dict(expected_delta) if expected_delta is not None else None,
                actual_delta=dict(actual_delta) if actual_delta is not None else None,
                refers_to=refers_to,
            )
            s.add(row)
            s.flush()
            return row

    def get(self, log_id: str) -> ImprovementAuditLog | None:
        with self.db.transaction(write=False) as s:
            return s.get(ImprovementAuditLog, log_id)

    def timeline(
        self, *, action_type: str | None = None, since: datetime | None = None, limit: int = 100
    ) -> list[ImprovementAuditLog]:
        """Newest first."""
        stmt = select(ImprovementAuditLog)
        if action_type is not None:
            stmt = stmt.where(ImprovementAuditLog.action_type == action_type)
        if since is not None:
            stmt = stmt.where(ImprovementAuditLog.created_at >= since)
        stmt = stmt.order_by(ImprovementAuditLog.created_at.desc(), ImprovementAuditLog.log_id).limit(limit)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt))

    def measurements(self, log_id: str) -> list[ImprovementAuditLog]:
        """The entries that measured (or otherwise followed up) one change, oldest first."""
        with self.db.transaction(write=False) as s:
            stmt = select(ImprovementAuditLog).where(ImprovementAuditLog.refers_to == log_id)
            return list(s.scalars(stmt.order_by(ImprovementAuditLog.created_at)))


# --------------------------------------------------------------------------- pipeline versions


class PipelineVersions:
    """Stored pipeline configurations; exactly one is active. `activate` and `rollback` are audited."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.audit = AuditLog(db)

    def register(
        self, version_id: str, config: Mapping[str, Any], *, description: str | None = None
    ) -> PipelineVersion:
        """Store a configuration as a candidate; registering the same version again returns the stored
        row. The id is a hash of the config, so the same id with a different config is an error."""
        with self.db.transaction() as s:
            row = s.get(PipelineVersion, version_id)
            if row is not None:
                if row.config != dict(config):
                    raise StoreConflictError(f"pipeline version {version_id} is stored with a different config")
                return row
            row = PipelineVersion(version_id=version_id, config=dict(config), description=description)
            s.add(row)
            s.flush()
            return row

    def register_config(self, config: PipelineConfig, *, description: str | None = None) -> PipelineVersion:
        data = config.model_dump(mode="json", by_alias=True)
        return self.register(config.version_id, data, description=description or config.name)

    def get(self, version_id: str) -> PipelineVersion | None:
        with self.db.transaction(write=False) as s:
            return s.get(PipelineVersion, version_id)

    def current(self) -> PipelineVersion | None:
        """The active version (None before the first activation)."""
        with self.db.transaction(write=False) as s:
            return s.scalar(select(PipelineVersion).where(PipelineVersion.status == "active"))

    def list_versions(self, *, status: str | None = None) -> list[PipelineVersion]:
        stmt = select(PipelineVersion)
        if status is not None:
            stmt = stmt.where(PipelineVersion.status == status)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(PipelineVersion.created_at, PipelineVersion.version_id)))

    def activate(
        self,
        version_id: str,
        *,
        actor: str = "system",
        reason: str = "manual",
        evidence: Mapping[str, Any] | None = None,
        quality: Mapping[str, float] | None = None,
    ) -> PipelineVersion:
        """Make `version_id` the one active version (the previous one is retired and remembered for
        `rollback`), and audit it. Activating the active version changes nothing."""
        with self.db.transaction() as s:
            _serialize(s, "pipeline_versions")
            target = _require(s, PipelineVersion, version_id)
            current = s.scalar(select(PipelineVersion).where(PipelineVersion.status == "active"))
            if current is not None and current.version_id == version_id:
                return target
            now = utcnow()
            if current is not None:
                current.status, current.retired_at = "retired", now
                s.flush()  # the one-active index must never see two
            target.status, target.activated_at, target.retired_at = "active", now, None
            target.previous_version_id = current.version_id if current is not None else None
            target.promoted_by = actor
            target.quality_at_promotion = dict(quality or {})
            s.flush()
            self.audit.record(
                "pipeline_activate",
                triggered_by=reason,
                actor=actor,
                evidence=dict(evidence or {}),
                pipeline_version_before=current.version_id if current is not None else None,
                pipeline_version_after=version_id,
                expected_delta=None,
            )
            return target

    def rollback(
        self,
        *,
        target_version: str | None = None,
        actor: str = "system",
        reason: str = "manual",
        evidence: Mapping[str, Any] | None = None,
    ) -> PipelineVersion:
        """Reactivate the version that was active before the current one (or `target_version`), retire
        the current one, audit it, and return the now-active version. Rolling back again steps further
        back (each version remembers what it replaced). Raises StoreConflictError when there is nothing
        to roll back to."""
        with self.db.transaction() as s:
            _serialize(s, "pipeline_versions")
            current = s.scalar(select(PipelineVersion).where(PipelineVersion.status == "active"))
            if current is None:
                raise StoreConflictError("no active pipeline version to roll back from")
            goal = target_version or current.previous_version_id
            if goal is None:
                raise StoreConflictError(f"pipeline version {current.version_id} has no previous version")
            if goal == current.version_id:
                raise StoreConflictError(f"pipeline version {goal} is already active")
            target = _require(s, PipelineVersion, goal)
            now = utcnow()
            current.status, current.retired_at = "retired", now
            s.flush()
            target.status, target.activated_at, target.retired_at = "active", now, None
            target.promoted_by = actor
            s.flush()
            self.audit.record(
                "pipeline_rollback",
                triggered_by=reason,
                actor=actor,
                evidence=dict(evidence or {}),
                pipeline_version_before=current.version_id,
                pipeline_version_after=target.version_id,
            )
            return target


# --------------------------------------------------------------------------- model calls


@dataclass(frozen=True)
class ModelUsage:
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    errors: int


class ModelCalls:
    """Every model call (chat, judge, scorer) with tokens, latency and cost."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self,
        *,
        model: str,
        purpose: str,
        prompt: str | Sequence[Any] = (),
        response: str | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        latency_ms: float | None = None,
        cost_usd: float | None = None,
        answer_id: str | None = None,
        run_id: str | None = None,
        error: str | None = None,
    ) -> ModelCall:
        """`prompt` is the message list (a plain string is stored as one user message)."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        with self.db.transaction() as s:
            row = ModelCall(
                model=model,
                purpose=purpose,
                prompt=messages,
                response=response,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                latency_ms=latency_ms,
                cost_usd=cost_usd,
                answer_id=answer_id,
                run_id=run_id,
                error=error,
            )
            s.add(row)
            s.flush()
            return row

    def for_answer(self, answer_id: str) -> list[ModelCall]:
        with self.db.transaction(write=False) as s:
            stmt = select(ModelCall).where(ModelCall.answer_id == answer_id)
            return list(s.scalars(stmt.order_by(ModelCall.created_at, ModelCall.call_id)))

    def usage(self, *, since: datetime | None = None) -> list[ModelUsage]:
        """Totals per model."""
        stmt = select(
            ModelCall.model,
            func.count(),
            func.coalesce(func.sum(ModelCall.prompt_tokens), 0),
            func.coalesce(func.sum(ModelCall.completion_tokens), 0),
            func.coalesce(func.sum(ModelCall.cost_usd), 0.0),
            func.count(ModelCall.error),
        ).group_by(ModelCall.model)
        if since is not None:
            stmt = stmt.where(ModelCall.created_at >= since)
        with self.db.transaction(write=False) as s:
            rows = s.execute(stmt.order_by(ModelCall.model)).all()
        return [ModelUsage(r[0], int(r[1]), int(r[2]), int(r[3]), float(r[4] or 0.0), int(r[5])) for r in rows]


# --------------------------------------------------------------------------- API keys

API_KEY_PREFIX = "rlk"
_KEY_RE = re.compile(r"^rlk_([0-9a-f]{16})_([A-Za-z0-9_-]{20,})$")
_DUMMY_HASH = _sha256("rlk_0000000000000000_dummy-key-for-constant-time-miss")


@dataclass(frozen=True)
class ApiKeyRecord:
    """What the service knows about a key: never the key itself."""

    key_id: str
    role: str
    name: str | None
    rate_limit_per_minute: int | None
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @classmethod
    def from_row(cls, row: ApiKey) -> ApiKeyRecord:
        return cls(
            key_id=row.key_id,
            role=row.role,
            name=row.name,
            rate_limit_per_minute=row.rate_limit_per_minute,
            created_at=row.created_at,
            revoked_at=row.revoked_at,
            last_used_at=row.last_used_at,
        )


@dataclass(frozen=True)
class IssuedApiKey:
    """The plain `key` exists only here: show it once; the database keeps its hash."""

    key: str
    record: ApiKeyRecord

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"IssuedApiKey(key='rlk_{self.record.key_id}_…', record={self.record!r})"


def hash_api_key(key: str) -> str:
    """sha256 of the whole key (the keys are 256-bit random, so no salt or slow hash is needed)."""
    return _sha256(key)


def api_key_id(key: str) -> str | None:
    """The public prefix id of a well-formed key, else None."""
    m = _KEY_RE.match(key.strip())
    return m.group(1) if m else None


class ApiKeys:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create_api_key(
        self, role: str, *, name: str | None = None, rate_limit_per_minute: int | None = 60
    ) -> IssuedApiKey:
        """A new key `rlk_<key_id>_<secret>` for `role` (user | admin); the plain key is returned once."""
        if role not in API_KEY_ROLES:
            raise ValueError(f"role must be one of {API_KEY_ROLES}, got {role!r}")
        if rate_limit_per_minute is not None and rate_limit_per_minute < 1:
            raise ValueError("rate_limit_per_minute must be positive (or None for the service default)")
        key_id = secrets.token_hex(8)
        key = f"{API_KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        with self.db.transaction() as s:
            row = ApiKey(
                key_id=key_id,
                key_hash=hash_api_key(key),
                role=role,
                name=name,
                rate_limit_per_minute=rate_limit_per_minute,
            )
            s.add(row)
            s.flush()
            return IssuedApiKey(key=key, record=ApiKeyRecord.from_row(row))

    def verify_api_key(self, key: str, *, touch: bool = False) -> ApiKeyRecord | None:
        """The record of a valid, unrevoked key; None otherwise. The hash comparison is constant-time and
        runs even for unknown prefixes. `touch=True` also stamps `last_used_at` (a write per call)."""
        key = key.strip()
        key_id = api_key_id(key)
        presented = hash_api_key(key)
        with self.db.transaction(write=touch) as s:
            row = s.get(ApiKey, key_id) if key_id is not None else None
            stored = row.key_hash if row is not None else _DUMMY_HASH
            if not hmac.compare_digest(presented, stored) or row is None or row.revoked_at is not None:
                return None
            if touch:
                row.last_used_at = utcnow()
                s.flush()
            return ApiKeyRecord.from_row(row)

    def revoke(self, key_id: str) -> bool:
        """Revoke a key by its id; False if unknown or already revoked."""
        with self.db.transaction() as s:
            result = s.execute(
                update(ApiKey)
                .where(ApiKey.key_id == key_id, ApiKey.revoked_at.is_(None))
                .values(revoked_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            return bool(getattr(result, "rowcount", 0))

    def set_rate_limit(self, key_id: str, rate_limit_per_minute: int | None) -> ApiKeyRecord:
        with self.db.transaction() as s:
            row = _require(s, ApiKey, key_id)
            row.rate_limit_per_minute = rate_limit_per_minute
            s.flush()
            return ApiKeyRecord.from_row(row)

    def get(self, key_id: str) -> ApiKeyRecord | None:
        with self.db.transaction(write=False) as s:
            row = s.get(ApiKey, key_id)
            return ApiKeyRecord.from_row(row) if row is not None else None

    def list_keys(self, *, include_revoked: bool = False) -> list[ApiKeyRecord]:
        stmt = select(ApiKey)
        if not include_revoked:
            stmt = stmt.where(ApiKey.revoked_at.is_(None))
        with self.db.transaction(write=False) as s:
            return [ApiKeyRecord.from_row(r) for r in s.scalars(stmt.order_by(ApiKey.created_at, ApiKey.key_id))]


# --------------------------------------------------------------------------- experiments and regression runs


class Experiments:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create(
        self,
        name: str,
        *,
        control_config: Mapping[str, Any],
        treatment_config: Mapping[str, Any],
        primary_metric: str,
        traffic_split: float = 0.05,
        min_sample_size: int = 500,
        guardrail_metrics: Sequence[str] = (),
        control_version: str | None = None,
        treatment_version: str | None = None,
    ) -> Experiment:
        if not 0.0 < traffic_split < 1.0:
            raise ValueError(f"traffic_split must be in (0, 1), got {traffic_split}")
        with self.db.transaction() as s:
            row = Experiment(
                name=name,
                control_config=dict(control_config),
                treatment_config=dict(treatment_config),
                control_version=control_version,
                treatment_version=treatment_version,
                traffic_split=traffic_split,
                min_sample_size=min_sample_size,
                primary_metric=primary_metric,
                guardrail_metrics=list(guardrail_metrics),
            )
            s.add(row)
            s.flush()
            return row

    def get(self, experiment_id: str) -> Experiment | None:
        with self.db.transaction(write=False) as s:
            return s.get(Experiment, experiment_id)

    def list_experiments(self, *, status: str | None = None) -> list[Experiment]:
        stmt = select(Experiment)
        if status is not None:
            stmt = stmt.where(Experiment.status == status)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(Experiment.created_at.desc(), Experiment.experiment_id)))

    def record_results(
        self,
        experiment_id: str,
        *,
        status: str,
        p_value: float | None = None,
        control_sample: int | None = None,
        treatment_sample: int | None = None,
        recommendation: str | None = None,
        results: Mapping[str, Any] | None = None,
        auto_promote_at: datetime | None = _UNSET,
    ) -> Experiment:
        """Store the latest aggregation (status: running | significant | no_effect | guardrail_breached | …)."""
        with self.db.transaction() as s:
            row = _require(s, Experiment, experiment_id)
            row.status = status
            row.p_value = p_value if p_value is not None else row.p_value
            if control_sample is not None:
                row.control_sample = control_sample
            if treatment_sample is not None:
                row.treatment_sample = treatment_sample
            if recommendation is not None:
                row.recommendation = recommendation
            if results is not None:
                row.results = dict(results)
            if auto_promote_at is not _UNSET:
                row.auto_promote_at = auto_promote_at
            row.updated_at = utcnow()
            s.flush()
            return row

    def mark_promoted(self, experiment_id: str, *, when: datetime | None = None) -> Experiment:
        with self.db.transaction() as s:
            row = _require(s, Experiment, experiment_id)
            row.status, row.promoted_at = "promoted", when or utcnow()
            row.updated_at = utcnow()
            s.flush()
            return row


class RegressionRuns:
    def __init__(self, db: Database) -> None:
        self.db = db

    def start(
        self, *, golden_set_version: int, pipeline_version: str, baseline: Mapping[str, float] | None = None
    ) -> RegressionRun:
        base = dict(baseline or {})
        with self.db.transaction() as s:
            row = RegressionRun(
                golden_set_version=golden_set_version,
                pipeline_version=pipeline_version,
                baseline=base,
                baseline_faithfulness=base.get("faithfulness"),
            )
            s.add(row)
            s.flush()
            return row

    def finish(
        self,
        run_id: str,
        *,
        metrics: Mapping[str, float],
        regression_detected: bool,
        rollback_triggered: bool = False,
        status: str = "completed",
        report: Mapping[str, Any] | None = None,
    ) -> RegressionRun:
        with self.db.transaction() as s:
            row = _require(s, RegressionRun, run_id)
            if row.completed_at is not None:
                raise StoreConflictError(f"regression run {run_id} already finished")
            row.metrics = dict(metrics)
            for m in METRICS:
                setattr(row, f"{m}_mean", metrics.get(m))
            row.regression_detected = regression_detected
            row.rollback_triggered = rollback_triggered
            row.run_status = status
            row.report = dict(report or {})
            row.completed_at = utcnow()
            s.flush()
            return row

    def get(self, run_id: str) -> RegressionRun | None:
        with self.db.transaction(write=False) as s:
            return s.get(RegressionRun, run_id)

    def latest(self, *, pipeline_version: str | None = None, status: str | None = "completed") -> RegressionRun | None:
        stmt = select(RegressionRun)
        if pipeline_version is not None:
            stmt = stmt.where(RegressionRun.pipeline_version == pipeline_version)
        if status is not None:
            stmt = stmt.where(RegressionRun.run_status == status)
        with self.db.transaction(write=False) as s:
            return s.scalar(stmt.order_by(RegressionRun.started_at.desc(), RegressionRun.run_id).limit(1))

    def list_runs(self, *, limit: int = 50) -> list[RegressionRun]:
        with self.db.transaction(write=False) as s:
            stmt = select(RegressionRun).order_by(RegressionRun.started_at.desc(), RegressionRun.run_id)
            return list(s.scalars(stmt.limit(limit)))
