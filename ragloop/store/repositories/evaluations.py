"""Evaluation rows (heuristic, LLM judge, human) for an answer. Apart from feedback because these are
machine or reviewer scores with their own tiers and failure diagnosis, not a user's rating."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select

from ragloop.store.db import Database
from ragloop.store.models import Answer, Evaluation
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
    ) -> Evaluation:
        """Record one evaluation. `tier` is heuristic | llm_judge | human; `status='failed'` (with `error`)
        records a judge that gave up, so no answer silently goes unevaluated. The four named metrics in
        `scores` also fill their own columns (for indexing and aggregation)."""
        if tier not in EVALUATION_TIERS:
            known = tuple(str(t) for t in EVALUATION_TIERS)
            raise ValueError(f"unknown evaluation tier {tier!r}; expected one of {known}")
        if status not in tuple(EvaluationStatus):
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
