"""Evaluation rows (heuristic, LLM judge, human) for an answer. Apart from feedback because these are
machine or reviewer scores with their own tiers and failure diagnosis, not a user's rating."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, func, select

from ragloop.store.db import Database
from ragloop.store.models import Answer, Evaluation, Query
from ragloop.store.repositories._base import METRICS, _require
from ragloop.store.vocabulary import EVALUATION_TIERS, EvaluationStatus


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
        status: str = EvaluationStatus.COMPLETED,
        error: str | None = None,
        evaluator_version: str | None = None,
        evaluator_prompt_sha: str | None = None,
    ) -> Evaluation:
        """Record one evaluation. `tier` is heuristic | llm_judge | human; `status='failed'` (with `error`)
        records a judge that gave up, so no answer silently goes unevaluated. The four named metrics in
        `scores` also fill their own columns (for indexing and aggregation)."""
        if tier not in EVALUATION_TIERS:
            known = tuple(str(t) for t in EVALUATION_TIERS)
            raise ValueError(f"unknown evaluation tier {tier!r}; expected one of {known}")
        if status not in tuple(EvaluationStatus):
            raise ValueError(
                f"evaluation status must be one of {tuple(str(s) for s in EvaluationStatus)}, got {status!r}"
            )
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
                evaluator_version=evaluator_version,
                evaluator_prompt_sha=evaluator_prompt_sha,
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

    def latest_for(self, answer_ids: Sequence[str], tier: str, *, status: str | None = None) -> dict[str, Evaluation]:
        """The latest evaluation of `tier` (and `status`, when given) of each answer that has one, in a
        few queries (chunks of 500 ids) instead of one per answer."""
        out: dict[str, Evaluation] = {}
        ids = list(dict.fromkeys(answer_ids))
        with self.db.transaction(write=False) as s:
            for i in range(0, len(ids), 500):
                stmt = select(Evaluation).where(
                    Evaluation.answer_id.in_(ids[i : i + 500]), Evaluation.evaluation_tier == tier
                )
                if status is not None:
                    stmt = stmt.where(Evaluation.status == status)
                for row in s.scalars(stmt.order_by(Evaluation.evaluated_at, Evaluation.eval_id)):
                    out[row.answer_id] = row  # later rows win: the latest
        return out

    def exists(self, answer_id: str, tier: str) -> bool:
        """Whether the answer has an evaluation (completed or failed) of `tier`."""
        stmt = select(Evaluation.eval_id).where(Evaluation.answer_id == answer_id, Evaluation.evaluation_tier == tier)
        with self.db.transaction(write=False) as s:
            return s.scalar(stmt.limit(1)) is not None

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

    def listed(
        self,
        *,
        tier: str | None = None,
        failure_mode: str | None = None,
        experiment_id: str | None = None,
        min_score: float | None = None,
        max_score: float | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[EvaluationListing], int]:
        """Evaluations newest first with their question and answer, filtered in SQL (the score filter
        too: `overall_score` below); and how many match in all, for paging."""
        overall = overall_score_sql()
        where: list[ColumnElement[bool]] = []
        if tier is not None:
            where.append(Evaluation.evaluation_tier == tier)
        if failure_mode is not None:
            where.append(Evaluation.failure_mode == failure_mode)
        if experiment_id is not None:
            where.append(Query.experiment_id == experiment_id)
        if min_score is not None:
            where.append(overall >= min_score)
        if max_score is not None:
            where.append(overall <= max_score)
        base = select(Evaluation, Query, Answer.answer_text, overall.label("overall"))
        base = base.join(Answer, Answer.answer_id == Evaluation.answer_id).join(
            Query, Query.query_id == Answer.query_id
        )
        stmt = base.where(*where).order_by(Evaluation.evaluated_at.desc(), Evaluation.eval_id)
        count = (
            select(func.count())
            .select_from(Evaluation)
            .join(Answer, Answer.answer_id == Evaluation.answer_id)
            .join(Query, Query.query_id == Answer.query_id)
            .where(*where)
        )
        with self.db.transaction(write=False) as s:
            total = int(s.scalar(count) or 0)
            rows = s.execute(stmt.limit(limit).offset(offset)).all()
            return [
                EvaluationListing(
                    evaluation=ev,
                    overall=float(score) if score is not None else None,
                    question=q.question_text,
                    answer=text,
                    experiment_id=q.experiment_id,
                    variant=q.variant,
                    pipeline_version=q.pipeline_version,
                )
                for ev, q, text, score in rows
            ], total

    def overall_by_answer(self, *, limit: int = 5000) -> dict[str, dict[str, float]]:
        """answer id → {tier: overall score of its latest completed evaluation at that tier}, over the
        `limit` answers most recently evaluated by a judge or a human (the only ones with a second
        opinion to compare with tier 1)."""
        overall = overall_score_sql()
        recent = (
            select(Evaluation.answer_id)
            .where(Evaluation.evaluation_tier != "heuristic", Evaluation.status == EvaluationStatus.COMPLETED)
            .group_by(Evaluation.answer_id)
            .order_by(func.max(Evaluation.evaluated_at).desc())
            .limit(limit)
        )
        stmt = (
            select(Evaluation.answer_id, Evaluation.evaluation_tier, overall)
            .where(Evaluation.answer_id.in_(recent.scalar_subquery()), Evaluation.status == EvaluationStatus.COMPLETED)
            .order_by(Evaluation.evaluated_at, Evaluation.eval_id)
        )
        out: dict[str, dict[str, float]] = {}
        with self.db.transaction(write=False) as s:
            for answer_id, tier, score in s.execute(stmt):
                if score is not None:  # later rows overwrite earlier ones: the latest per tier wins
                    out.setdefault(answer_id, {})[tier] = float(score)
        return out


@dataclass(frozen=True)
class EvaluationListing:
    """One evaluation as the admin list shows it: with the question, the answer and the arm that served it."""

    evaluation: Evaluation
    overall: float | None
    question: str
    answer: str
    experiment_id: str | None
    variant: str | None
    pipeline_version: str


OVERALL_METRICS = ("faithfulness", "answer_relevance", "context_precision")


def overall_score_sql() -> ColumnElement[float]:
    """One number per evaluation, the same for every tier so they can be compared and filtered: tier 1's
    `heuristic_score`; otherwise the mean of the answer metrics it gave (faithfulness, answer relevance,
    context precision; the judge's own `overall`); NULL when it gave none."""
    cols = [getattr(Evaluation, m) for m in OVERALL_METRICS]
    total = sum((func.coalesce(c, 0.0) for c in cols[1:]), func.coalesce(cols[0], 0.0))
    count = sum((case((c.is_not(None), 1), else_=0) for c in cols[1:]), case((cols[0].is_not(None), 1), else_=0))
    return func.coalesce(Evaluation.heuristic_score, total / func.nullif(count, 0))
