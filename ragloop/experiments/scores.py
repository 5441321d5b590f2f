"""Per-answer scores of a set of served answers, by metric (`metrics.Metric`): what an experiment's
arms are compared on (`aggregation`), and what a pipeline switch's before and after windows are
compared on (`activation_audit`). One reader for both, so the two read a score the same way: the
latest completed evaluation per answer and tier, the answer's latest explicit rating (positive 1,
negative 0), latency in seconds, a refusal as 1. Each score keeps its answer's session, the unit an
experiment assigns and a window collects whole, so `ArmScores.summary` gives the arm's mean a
session-clustered variance (`ArmSummary.clustered`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import select

from ragloop.experiments.metrics import Metric
from ragloop.experiments.stats import ArmSummary
from ragloop.store.vocabulary import EvaluationStatus

if TYPE_CHECKING:
    from ragloop.store import Store

K = TypeVar("K", bound=Hashable)


@dataclass
class ArmScores:
    scores: dict[Metric, list[float]] = field(default_factory=lambda: defaultdict(list))
    sessions: dict[Metric, list[str]] = field(default_factory=lambda: defaultdict(list))
    """The session of each score in `scores`, position by position."""
    answers: int = 0

    def add(self, metric: Metric, value: float, session: str) -> None:
        self.scores[metric].append(value)
        self.sessions[metric].append(session)

    def summary(self, metric: Metric) -> ArmSummary:
        """n, mean and the session-clustered variance of the metric's scores."""
        return ArmSummary.clustered(self.scores.get(metric, []), self.sessions.get(metric, []))


def answer_scores(store: Store, where: tuple[Any, ...], group: Callable[[str | None], K | None]) -> dict[K, ArmScores]:
    """Scores of the answers matching `where` (conditions on `Answer` and `Query`), grouped by
    `group(the query's experiment variant)`; an answer whose group is None is left out."""
    from ragloop.store.models import Answer, Evaluation, Query

    groups: dict[K, ArmScores] = {}
    group_of: dict[str, K] = {}
    session_of: dict[str, str] = {}
    with store.db.transaction(write=False) as s:
        answers = s.execute(
            select(Answer.answer_id, Query.variant, Query.session_id, Answer.latency_ms, Answer.refused)
            .join(Query, Query.query_id == Answer.query_id)
            .where(*where)
        ).all()
        for answer_id, variant, session_id, latency_ms, refused in answers:
            key = group(variant)
            if key is None:
                continue
            group_of[answer_id] = key
            session_of[answer_id] = session_id
            arm = groups.setdefault(key, ArmScores())
            arm.answers += 1
            if latency_ms is not None:
                arm.add(Metric.LATENCY_P99, latency_ms / 1000.0, session_id)
            arm.add(Metric.REFUSAL_RATE, 1.0 if refused else 0.0, session_id)
        if not group_of:
            return groups
        evals = s.execute(
            select(Evaluation)
            .join(Answer, Answer.answer_id == Evaluation.answer_id)
            .join(Query, Query.query_id == Answer.query_id)
            .where(*where, Evaluation.status == EvaluationStatus.COMPLETED)
            .order_by(Evaluation.evaluated_at)
        ).scalars()
        latest: dict[tuple[str, str], Any] = {}
        for ev in evals:
            latest[(ev.answer_id, ev.evaluation_tier)] = ev
    for answer_id, (_at, rating) in timed_ratings(store, where).items():
        if answer_id in group_of:
            groups[group_of[answer_id]].add(Metric.USER_RATING, rating, session_of[answer_id])
    for (answer_id, tier), ev in latest.items():
        if answer_id not in group_of:
            continue
        arm = groups[group_of[answer_id]]
        for metric in Metric:
            if metric.tier is None or metric.tier != tier:
                continue
            value = getattr(ev, metric.column, None)
            if value is not None and math.isfinite(float(value)):
                arm.add(metric, float(value), session_of[answer_id])
    return groups


def timed_ratings(store: Store, where: tuple[Any, ...]) -> dict[str, tuple[Any, float]]:
    """answer id -> (when, rating as 1/0) of its latest explicit rating, for the answers matching `where`."""
    from ragloop.store.models import Answer, Query, UserFeedback

    with store.db.transaction(write=False) as s:
        rows = s.execute(
            select(UserFeedback.answer_id, UserFeedback.created_at, UserFeedback.rating)
            .join(Answer, Answer.answer_id == UserFeedback.answer_id)
            .join(Query, Query.query_id == Answer.query_id)
            .where(*where)
            .order_by(UserFeedback.created_at, UserFeedback.feedback_id)
        ).all()
    return {answer_id: (at, 1.0 if rating == "positive" else 0.0) for answer_id, at, rating in rows}
