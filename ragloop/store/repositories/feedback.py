"""User feedback on answers and its weight. Apart from evaluations because its weighting rule is the
one place that says how much explicit feedback counts against automatic scores."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select

from ragloop.store.db import Database
from ragloop.store.models import RATINGS, Answer, UserFeedback
from ragloop.store.repositories._base import _require


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
