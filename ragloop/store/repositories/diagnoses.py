"""Diagnoses: one per answer, from selection to verdict (or to a recorded give-up).

Life of a diagnosis::

    open ──► pending ──complete──► completed
      │        │ fail (attempts left) ──► retrying ──complete──► completed
      │        │                             │ fail (last attempt) ──► failed
      │        └─────────────────────────────┘
      └─skip─► skipped (no ideal answer yet) ──open again, once a correction arrives──► pending

The retries themselves are the evaluation queue's (a `diagnosis` job per answer, leases and
backoff); this table is what the API shows and what a replay reads. `candidates` is the selection
query of the diagnosis pass: answers with a reason to diagnose and no diagnosis yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, exists, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from ragloop.store.db import Database
from ragloop.store.improve_models import DIAGNOSIS_STATUSES, DiagnosisRecord
from ragloop.store.models import Answer, Evaluation, UserFeedback, new_id, utcnow
from ragloop.store.repositories._base import NotFoundError, _require
from ragloop.store.vocabulary import DiagnosisStatus, EvaluationStatus, Tier

MAX_ERROR_CHARS = 4000
DIAGNOSES = cast(Table, DiagnosisRecord.__table__)


@dataclass(frozen=True)
class Candidate:
    """An answer the pass should diagnose, with why."""

    answer_id: str
    reasons: tuple[str, ...]


class Diagnoses:
    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    def open(
        self,
        answer_id: str,
        *,
        reasons: Sequence[str] = (),
        ideal_answer: str | None = None,
        ideal_source: str | None = None,
        collection: str | None = None,
        pipeline_version: str | None = None,
    ) -> DiagnosisRecord:
        """The answer's diagnosis, created `pending` if it has none (idempotent: an existing one is returned
        with any new reasons added; a `skipped` one becomes `pending` again with the new ideal answer)."""
        now = self.clock()
        with self.db.transaction() as s:
            if s.scalar(select(DiagnosisRecord.diagnosis_id).where(DiagnosisRecord.answer_id == answer_id)) is None:
                _require(s, Answer, answer_id)
                insert = postgresql.insert if self.db.dialect == "postgresql" else sqlite.insert
                s.execute(  # two openers racing: one row (the unique answer_id), neither fails
                    insert(DIAGNOSES)
                    .values(
                        diagnosis_id=new_id(),
                        answer_id=answer_id,
                        status=DiagnosisStatus.PENDING,
                        reasons=list(dict.fromkeys(reasons)),
                        ideal_answer=ideal_answer,
                        ideal_source=ideal_source,
                        collection=collection,
                        pipeline_version=pipeline_version,
                        actions=[],
                        attempts=0,
                        created_at=now,
                        updated_at=now,
                    )
                    .on_conflict_do_nothing(index_elements=["answer_id"])
                )
            row = self._locked(s, answer_id)
            merged = list(dict.fromkeys([*row.reasons, *reasons]))
            if merged != row.reasons:
                row.reasons, row.updated_at = merged, now
            if row.status == DiagnosisStatus.SKIPPED and ideal_answer:
                row.status, row.error, row.updated_at = DiagnosisStatus.PENDING, None, now
                row.ideal_answer, row.ideal_source = ideal_answer, ideal_source
            s.flush()
            return row

    def skip(self, answer_id: str, reason: str, *, reasons: Sequence[str] = ()) -> DiagnosisRecord:
        """Record that the answer cannot be diagnosed yet (`reason`), so the pass stops selecting it until
        a correction arrives. Created if absent; a diagnosis that has an ideal answer, or is under way or
        done, is left alone."""
        row = self.open(answer_id, reasons=reasons)
        if row.status != DiagnosisStatus.PENDING or row.attempts or row.ideal_answer:
            return row
        with self.db.transaction() as s:
            row = self._locked(s, answer_id)
            if row.status == DiagnosisStatus.PENDING and not row.ideal_answer:
                row.status, row.error, row.updated_at = DiagnosisStatus.SKIPPED, reason[:MAX_ERROR_CHARS], self.clock()
            s.flush()
            return row

    def complete(
        self,
        answer_id: str,
        *,
        failure_mode: str,
        confidence: float,
        evidence: Mapping[str, Any],
        actions: Sequence[Mapping[str, Any]],
        rule: str,
        diagnosis_input: Mapping[str, Any] | None,
        ideal_answer: str | None = None,
        ideal_source: str | None = None,
        collection: str | None = None,
        pipeline_version: str | None = None,
    ) -> DiagnosisRecord:
        """Record the verdict (counts as an attempt). Call it in the transaction that completes the job."""
        now = self.clock()
        with self.db.transaction() as s:
            row = self._locked(s, answer_id)
            row.status, row.attempts, row.error = DiagnosisStatus.COMPLETED, row.attempts + 1, None
            row.failure_mode, row.confidence, row.rule = failure_mode, float(confidence), rule
            row.evidence, row.actions = dict(evidence), [dict(a) for a in actions]
            row.diagnosis_input = dict(diagnosis_input) if diagnosis_input is not None else None
            for name, value in (
                ("ideal_answer", ideal_answer),
                ("ideal_source", ideal_source),
                ("collection", collection),
                ("pipeline_version", pipeline_version),
            ):
                if value is not None:
                    setattr(row, name, value)
            row.updated_at = row.diagnosed_at = now
            s.flush()
            return row

    def fail(self, answer_id: str, error: str, *, final: bool) -> DiagnosisRecord:
        """Record a failed attempt: `retrying` while attempts are left, `failed` after the last one."""
        with self.db.transaction() as s:
            row = self._locked(s, answer_id)
            row.status = DiagnosisStatus.FAILED if final else DiagnosisStatus.RETRYING
            row.attempts, row.error, row.updated_at = row.attempts + 1, error[:MAX_ERROR_CHARS], self.clock()
            s.flush()
            return row

    def reopen(self, answer_id: str, reason: str) -> DiagnosisRecord:
        """A failed diagnosis back to pending (after fixing what failed it), attempts reset."""
        with self.db.transaction() as s:
            row = self._locked(s, answer_id)
            row.status, row.attempts, row.updated_at = DiagnosisStatus.PENDING, 0, self.clock()
            row.reasons = list(dict.fromkeys([*row.reasons, reason]))
            s.flush()
            return row

    @staticmethod
    def _locked(s: Any, answer_id: str) -> DiagnosisRecord:
        row: DiagnosisRecord | None = s.scalar(
            select(DiagnosisRecord).where(DiagnosisRecord.answer_id == answer_id).with_for_update()
        )
        if row is None:
            raise NotFoundError(f"no diagnosis for answer {answer_id!r}")
        return row

    # ---------------------------------------------------------------- reading

    def get(self, answer_id: str) -> DiagnosisRecord | None:
        with self.db.transaction(write=False) as s:
            return s.scalar(select(DiagnosisRecord).where(DiagnosisRecord.answer_id == answer_id))

    def listed(
        self,
        *,
        status: str | None = None,
        failure_mode: str | None = None,
        collection: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[DiagnosisRecord]:
        """Newest first."""
        if status is not None and status not in DIAGNOSIS_STATUSES:
            raise ValueError(f"unknown diagnosis status {status!r}; expected {DIAGNOSIS_STATUSES}")
        stmt = select(DiagnosisRecord)
        if status is not None:
            stmt = stmt.where(DiagnosisRecord.status == status)
        if failure_mode is not None:
            stmt = stmt.where(DiagnosisRecord.failure_mode == failure_mode)
        if collection is not None:
            stmt = stmt.where(DiagnosisRecord.collection == collection)
        if since is not None:
            stmt = stmt.where(DiagnosisRecord.updated_at >= since)
        stmt = stmt.order_by(DiagnosisRecord.updated_at.desc(), DiagnosisRecord.diagnosis_id).limit(limit)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt))

    def counts(self) -> dict[str, int]:
        """Diagnoses by status (zeros included)."""
        with self.db.transaction(write=False) as s:
            rows = s.execute(select(DiagnosisRecord.status, func.count()).group_by(DiagnosisRecord.status)).all()
        out: dict[str, int] = {str(s): 0 for s in DIAGNOSIS_STATUSES}
        out.update({st: int(n) for st, n in rows})
        return out

    def mode_counts(self) -> dict[str, int]:
        """Completed diagnoses by failure mode."""
        stmt = (
            select(DiagnosisRecord.failure_mode, func.count())
            .where(DiagnosisRecord.status == DiagnosisStatus.COMPLETED)
            .group_by(DiagnosisRecord.failure_mode)
        )
        with self.db.transaction(write=False) as s:
            return {str(m): int(n) for m, n in s.execute(stmt).all() if m is not None}

    def candidates(
        self, *, heuristic_threshold: float, judge_threshold: float, since: datetime | None = None, limit: int = 100
    ) -> list[Candidate]:
        """Answers without a diagnosis (or skipped for want of an ideal answer and corrected since) that
        have a reason for one, oldest first: negative feedback, a correction, a completed tier-1 score
        below `heuristic_threshold`, or a completed tier-2 judgement whose `failure_evidence.overall`
        is below `judge_threshold`."""
        negative = exists().where(UserFeedback.answer_id == Answer.answer_id, UserFeedback.rating == "negative")
        corrected = exists().where(
            UserFeedback.answer_id == Answer.answer_id,
            UserFeedback.corrected_answer.is_not(None),
            UserFeedback.corrected_answer != "",
        )
        skipped = exists().where(
            DiagnosisRecord.answer_id == Answer.answer_id, DiagnosisRecord.status == DiagnosisStatus.SKIPPED
        )
        undiagnosed = or_(~exists().where(DiagnosisRecord.answer_id == Answer.answer_id), and_(skipped, corrected))
        low = exists().where(
            Evaluation.answer_id == Answer.answer_id,
            Evaluation.evaluation_tier == Tier.HEURISTIC,
            Evaluation.status == EvaluationStatus.COMPLETED,
            Evaluation.heuristic_score < heuristic_threshold,
        )
        judged = exists().where(
            Evaluation.answer_id == Answer.answer_id,
            Evaluation.evaluation_tier == Tier.LLM_JUDGE,
            Evaluation.status == EvaluationStatus.COMPLETED,
        )
        stmt = select(
            Answer.answer_id, negative.label("neg"), corrected.label("cor"), low.label("low"), judged.label("judged")
        ).where(undiagnosed, or_(negative, corrected, low, judged))
        if since is not None:
            stmt = stmt.where(Answer.created_at >= since)
        stmt = stmt.order_by(Answer.created_at, Answer.answer_id).limit(limit * 4)
        out: list[Candidate] = []
        with self.db.transaction(write=False) as s:
            rows = s.execute(stmt).all()
            for answer_id, neg, cor, lo, jud in rows:
                reasons = [
                    r for r, on in (("negative_feedback", neg), ("correction", cor), ("low_heuristic_score", lo)) if on
                ]
                if jud and self._judged_wrong(s, answer_id, judge_threshold):
                    reasons.append("judged_wrong")
                if reasons:
                    out.append(Candidate(answer_id, tuple(reasons)))
                if len(out) >= limit:
                    break
        return out

    @staticmethod
    def _judged_wrong(s: Any, answer_id: str, threshold: float) -> bool:
        """The latest completed tier-2 judgement scored the answer below `threshold` overall (the judge
        writes its overall into the evidence; JSON paths differ by backend, so it is read here)."""
        row = s.scalar(
            select(Evaluation)
            .where(
                and_(
                    Evaluation.answer_id == answer_id,
                    Evaluation.evaluation_tier == Tier.LLM_JUDGE,
                    Evaluation.status == EvaluationStatus.COMPLETED,
                )
            )
            .order_by(Evaluation.evaluated_at.desc(), Evaluation.eval_id.desc())
            .limit(1)
        )
        overall = (row.failure_evidence or {}).get("overall") if row is not None else None
        return isinstance(overall, int | float) and float(overall) < threshold
