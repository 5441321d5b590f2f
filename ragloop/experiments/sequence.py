"""An experiment's always-valid confidence sequence over time, for drawing.

The aggregator stores only its latest look (`experiments.results`): the always-valid interval needs
no history to be valid, so none is kept. The sequence is recomputed here instead, from the same
scores `aggregation.arm_scores` reads, each taken to be known from the moment it existed (an
answer's latency and refusal when the answer was stored, an evaluation's score when it was
evaluated): at each checkpoint the two arms' scores known by then go through the same `compare()`
with the same design as a look at that moment. Because a confidence sequence covers the true
difference at every sample size simultaneously, the whole curve may be read at once, which is the
point of drawing it; the only difference from the looks actually taken is an evaluation re-run
later (the latest one per answer and tier counts, as in the aggregator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import select

from ragloop.experiments.aggregation import ALPHA, _design, timed_ratings
from ragloop.experiments.assignment import Variant
from ragloop.experiments.metrics import Metric, parse_metric
from ragloop.experiments.stats import ArmSummary, compare
from ragloop.store.vocabulary import EvaluationStatus

if TYPE_CHECKING:
    from ragloop.store import Store

MAX_POINTS = 200


@dataclass(frozen=True)
class SequencePoint:
    """The comparison as a look at `at` would have made it."""

    at: datetime
    n_control: int
    n_treatment: int
    difference: float
    always_valid_lo: float | None
    always_valid_hi: float | None
    welch_lo: float | None
    welch_hi: float | None
    burned_in: bool


@dataclass
class ConfidenceSequence:
    experiment_id: str
    metric: str
    direction: str
    alpha: float
    min_effect: float
    min_sample_size: int
    burn_in: int
    points: list[SequencePoint] = field(default_factory=list)


def _timed_scores(store: Store, experiment_id: str, metric: Metric) -> list[tuple[datetime, Variant, float]]:
    """(when the score existed, arm, score) for every answer the experiment served, oldest first."""
    from ragloop.store.models import Answer, Evaluation, Query

    out: list[tuple[datetime, Variant, float]] = []
    if metric is Metric.USER_RATING:
        variants = _variants(store, experiment_id)
        rated = timed_ratings(store, experiment_id).items()
        out = [(at, variants[a], value) for a, (at, value) in rated if a in variants]
        return sorted(out, key=lambda r: r[0])
    with store.db.transaction(write=False) as s:
        if metric.tier is None:
            rows = s.execute(
                select(Answer.created_at, Query.variant, Answer.latency_ms, Answer.refused)
                .join(Query, Query.query_id == Answer.query_id)
                .where(Query.experiment_id == experiment_id)
            ).all()
            for at, variant, latency_ms, refused in rows:
                if variant not in tuple(Variant):
                    continue
                if metric is Metric.LATENCY_P99:
                    if latency_ms is not None:
                        out.append((at, Variant(variant), latency_ms / 1000.0))
                else:
                    out.append((at, Variant(variant), 1.0 if refused else 0.0))
        else:
            column = getattr(Evaluation, metric.column)
            evals = s.execute(
                select(Evaluation.answer_id, Evaluation.evaluated_at, Query.variant, column)
                .join(Answer, Answer.answer_id == Evaluation.answer_id)
                .join(Query, Query.query_id == Answer.query_id)
                .where(
                    Query.experiment_id == experiment_id,
                    Evaluation.status == EvaluationStatus.COMPLETED,
                    Evaluation.evaluation_tier == metric.tier.value,
                )
                .order_by(Evaluation.evaluated_at)
            ).all()
            latest: dict[str, tuple[datetime, str, float | None]] = {}
            for answer_id, at, variant, value in evals:
                latest[answer_id] = (at, variant, value)
            for at, variant, value in latest.values():
                if variant in tuple(Variant) and value is not None and math.isfinite(float(value)):
                    out.append((at, Variant(variant), float(value)))
    out.sort(key=lambda r: r[0])
    return out


def _variants(store: Store, experiment_id: str) -> dict[str, Variant]:
    from ragloop.store.models import Answer, Query

    with store.db.transaction(write=False) as s:
        rows = s.execute(
            select(Answer.answer_id, Query.variant)
            .join(Query, Query.query_id == Answer.query_id)
            .where(Query.experiment_id == experiment_id)
        ).all()
    return {a: Variant(v) for a, v in rows if v in tuple(Variant)}


def _finite(x: float) -> float | None:
    return round(x, 6) if math.isfinite(x) else None


def confidence_sequence(
    store: Store, experiment_id: str, metric_name: str | None = None, *, points: int = 60
) -> ConfidenceSequence:
    """The sequence of `metric_name` (default: the primary metric) at up to `points` checkpoints spread
    evenly over the scores as they arrived. LookupError for an unknown experiment, ValueError for an
    unknown metric."""
    row = store.experiments.get(experiment_id)
    if row is None:
        raise LookupError(f"no experiment {experiment_id!r}")
    metric = parse_metric(metric_name or row.primary_metric)
    design = _design(row, metric)
    seq = ConfidenceSequence(
        experiment_id=experiment_id,
        metric=metric.value,
        direction=metric.direction.value,
        alpha=ALPHA,
        min_effect=row.min_effect,
        min_sample_size=row.min_sample_size,
        burn_in=design.burn_in,
    )
    scores = _timed_scores(store, experiment_id, metric)
    arms: dict[Variant, list[float]] = {Variant.CONTROL: [], Variant.TREATMENT: []}
    ready: list[int] = []  # indexes after which both arms have the two scores a comparison needs
    for i, (_, variant, value) in enumerate(scores):
        arms[variant].append(value)
        if min(len(arms[Variant.CONTROL]), len(arms[Variant.TREATMENT])) >= 2:
            ready.append(i)
    if not ready:
        return seq
    k = max(1, min(points, MAX_POINTS, len(ready)))
    picks = sorted({ready[round(j * (len(ready) - 1) / max(1, k - 1))] for j in range(k)})
    for i in picks:
        upto = scores[: i + 1]
        c = [v for _, arm, v in upto if arm is Variant.CONTROL]
        t = [v for _, arm, v in upto if arm is Variant.TREATMENT]
        cmp = compare(ArmSummary.of(c), ArmSummary.of(t), design)
        seq.points.append(
            SequencePoint(
                at=scores[i][0],
                n_control=len(c),
                n_treatment=len(t),
                difference=round(cmp.difference, 6),
                always_valid_lo=_finite(cmp.always_valid_ci.lo),
                always_valid_hi=_finite(cmp.always_valid_ci.hi),
                welch_lo=_finite(cmp.welch.ci.lo),
                welch_hi=_finite(cmp.welch.ci.hi),
                burned_in=cmp.burned_in,
            )
        )
    return seq
