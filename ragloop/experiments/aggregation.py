"""One look at an experiment: per-arm scores → `compare()` per metric → guardrails, recommendation,
and (when every rule holds) promotion.

`aggregate(store, experiment_id, clock)` reads the scores of the answers each arm served
(`queries.experiment_id/variant` → answers → evaluations: tier-1 on every answer, tier-2 on the
routed share), compares them with the always-valid test, and stores the result in the experiment
row in the shape `GET /v1/experiments/{id}/results` returns. Then, in this order:
1. a breached guardrail halts the experiment at once (a conditional UPDATE, audited): assignment
   sends everyone to control from the next query;
2. when the primary metric is `promotable` (samples, always-valid p, minimum effect), the
   minimum duration has passed, no guardrail is breached and the maintenance window is open, the
   treatment is promoted (`promotion.promote_experiment`: smoke test first, exactly one winner).
Recommendation: `halted`, `promote_treatment` (all rules hold, duration included), `keep_control`
(enough samples and the confidence sequence excludes a gain of `min_effect`), else `continue`.
The Welch p-value is reported beside the always-valid one and never decides anything.

A periodic task (`ragloop serve`, every `experiment_aggregate_interval_s`, 300 by default) calls
`aggregate_running`.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from ragloop.experiments import scores
from ragloop.experiments._tdist import t_critical
from ragloop.experiments.assignment import ExperimentStatus, Variant
from ragloop.experiments.decisions import check_guardrail, promotable
from ragloop.experiments.metrics import Metric, parse_metric
from ragloop.experiments.promotion import MaintenanceWindow, SmokeTest, promote_experiment
from ragloop.experiments.registry import Clock, utc_now
from ragloop.experiments.scores import ArmScores, answer_scores
from ragloop.experiments.stats import ArmSummary, SequentialDesign, compare

if TYPE_CHECKING:
    from ragloop.store import Experiment, Store

ALPHA = 0.05


class Recommendation:
    CONTINUE = "continue"
    PROMOTE = "promote_treatment"
    KEEP_CONTROL = "keep_control"
    HALTED = "halted"


def _experiment(experiment_id: str) -> tuple[Any, ...]:
    from ragloop.store.models import Query

    return (Query.experiment_id == experiment_id,)


def _variant(name: str | None) -> Variant | None:
    try:
        return Variant(name or "")
    except ValueError:
        return None


def arm_scores(store: Store, experiment_id: str) -> dict[Variant, ArmScores]:
    """Every score of the answers each arm served (`scores.answer_scores`)."""
    found = answer_scores(store, _experiment(experiment_id), _variant)
    return {v: found.get(v, ArmScores()) for v in Variant}


def timed_ratings(store: Store, experiment_id: str) -> dict[str, tuple[Any, float]]:
    """answer id -> (when, rating as 1/0) of its latest explicit rating, for the experiment's answers."""
    return scores.timed_ratings(store, _experiment(experiment_id))


def _arm_json(metric: Metric, scores: list[float], summary: ArmSummary) -> dict[str, Any]:
    """n, sessions, mean and its session-clustered 95% interval (t with sessions − 1 df)."""
    n = summary.n
    if n == 0:
        return {"n": 0, "sessions": 0, "mean": None, "ci95": None}
    x = np.asarray(scores, dtype=np.float64)
    out: dict[str, Any] = {"n": n, "sessions": summary.units, "mean": round(summary.mean, 6), "ci95": None}
    if summary.independent >= 2:
        half = t_critical(ALPHA, summary.independent - 1) * summary.sd / math.sqrt(n)
        out["ci95"] = {"lo": round(summary.mean - half, 6), "hi": round(summary.mean + half, 6)}
    if metric is Metric.LATENCY_P99:
        out["p99"] = round(float(np.percentile(x, 99)), 6)
    return out


def _metrics_of(row: Experiment) -> list[Metric]:
    primary = parse_metric(row.primary_metric)
    guards = [parse_metric(m) for m in row.guardrail_metrics]
    return list(dict.fromkeys([primary, *guards]))


def _design(row: Experiment, metric: Metric) -> SequentialDesign:
    return SequentialDesign.plan(
        n_treatment=max(2, row.min_sample_size),
        traffic_split=min(0.5, row.traffic_split),
        sd=metric.planning_sd,
        alpha=ALPHA,
        burn_in=max(2, min(100, row.min_sample_size // 5)),
    )


def aggregate(
    store: Store,
    experiment_id: str,
    clock: Clock = utc_now,
    *,
    smoke_test: SmokeTest | None = None,
    window: MaintenanceWindow | None = None,
    actor: str = "aggregator",
) -> dict[str, Any]:
    """Look once; store and return the results (guardrail halts and promotions happen here)."""
    row = store.experiments.get(experiment_id)
    if row is None:
        raise LookupError(f"no experiment {experiment_id!r}")
    now = clock()
    primary = parse_metric(row.primary_metric)
    arms = arm_scores(store, experiment_id)
    metrics: dict[str, Any] = {}
    comparisons = {}
    for metric in _metrics_of(row):
        control, treatment = arms[Variant.CONTROL], arms[Variant.TREATMENT]
        c_sum, t_sum = control.summary(metric), treatment.summary(metric)
        entry: dict[str, Any] = {
            "direction": metric.direction.value,
            "control": _arm_json(metric, control.scores[metric], c_sum),
            "treatment": _arm_json(metric, treatment.scores[metric], t_sum),
            "comparison": None,
        }
        if c_sum.independent >= 2 and t_sum.independent >= 2:
            cmp = compare(c_sum, t_sum, _design(row, metric))
            comparisons[metric] = cmp
            entry["comparison"] = cmp.to_json()
        metrics[metric.value] = entry

    status = ExperimentStatus(row.status)
    breaches: list[dict[str, Any]] = []
    for name in row.guardrail_metrics:
        metric = parse_metric(name)
        cmp_g = comparisons.get(metric)
        if cmp_g is None:
            continue
        check = check_guardrail(cmp_g, alpha=ALPHA, direction=metric.direction)
        metrics[metric.value]["guardrail"] = {"breached": check.breached, "reason": check.reason}
        if check.breached:
            breaches.append({"metric": metric.value, "regression": round(check.regression, 6), "reason": check.reason})

    cmp_p = comparisons.get(primary)
    decision = (
        promotable(cmp_p, min_samples=row.min_sample_size, min_effect=row.min_effect, alpha=ALPHA) if cmp_p else None
    )
    started = row.started_at or row.created_at
    duration_s = max(0.0, (now - started).total_seconds())
    duration_ok = duration_s >= row.min_duration_s
    auto_promote_at = started + timedelta(seconds=row.min_duration_s)
    samples = {"control": arms[Variant.CONTROL].answers, "treatment": arms[Variant.TREATMENT].answers}

    if status is ExperimentStatus.RUNNING and breaches:
        reason = "guardrail breached: " + "; ".join(f"{b['metric']} {b['reason']}" for b in breaches)
        if store.experiments.transition(
            experiment_id, from_statuses=[status.value], to="halted", reason=reason, when=now, final=True
        ):
            store.audit.record(
                "experiment_halt",
                triggered_by=reason,
                actor=actor,
                evidence={"experiment_id": experiment_id, "breaches": breaches, "metrics": metrics},
                pipeline_version_before=row.control_version,
                pipeline_version_after=row.treatment_version,
            )
        status = ExperimentStatus.HALTED

    gain_excluded = bool(
        cmp_p is not None
        and cmp_p.burned_in
        and min(cmp_p.control.n, cmp_p.treatment.n) >= row.min_sample_size
        and _signed_hi(cmp_p.always_valid_ci, primary) < row.min_effect
    )
    if status is ExperimentStatus.HALTED:
        recommendation = Recommendation.HALTED
    elif decision is not None and decision.promote and not breaches and duration_ok:
        recommendation = Recommendation.PROMOTE
    elif gain_excluded:
        recommendation = Recommendation.KEEP_CONTROL
    else:
        recommendation = Recommendation.CONTINUE

    results: dict[str, Any] = {
        "experiment_id": experiment_id,
        "name": row.name,
        "status": status.value,
        "primary_metric": primary.value,
        "metrics": metrics,
        "p_value": {
            "always_valid": cmp_p.always_valid_p if cmp_p else None,
            "welch": cmp_p.welch.p_value if cmp_p else None,
        },
        "samples": samples,
        "min_sample_size": row.min_sample_size,
        "duration_s": round(duration_s, 1),
        "min_duration_s": row.min_duration_s,
        "recommendation": recommendation,
        "reasons": list(decision.reasons) if decision else ["fewer than 2 scores in an arm: nothing to compare yet"],
        "guardrail_breaches": breaches,
        "auto_promote_at": auto_promote_at.isoformat() if status is ExperimentStatus.RUNNING else None,
        "aggregated_at": now.isoformat(),
    }
    store.experiments.record_results(
        experiment_id,
        status=status.value,
        p_value=cmp_p.always_valid_p if cmp_p else None,
        control_sample=samples["control"],
        treatment_sample=samples["treatment"],
        recommendation=recommendation,
        results=results,
        auto_promote_at=auto_promote_at if status is ExperimentStatus.RUNNING else None,
    )
    if recommendation == Recommendation.PROMOTE and status is ExperimentStatus.RUNNING:
        if window is None or window.is_open(now):
            outcome = promote_experiment(
                store, experiment_id, evidence=results, clock=clock, smoke_test=smoke_test, actor=actor
            )
            results["promotion"] = outcome.to_json()
            results["status"] = outcome.status
        else:
            results["promotion"] = {"promoted": False, "reason": f"outside the maintenance window {window}"}
    return results


def _signed_hi(ci: Any, metric: Metric) -> float:
    """The upper end of the interval on the *improvement* (sign flipped for lower-is-better)."""
    if metric.direction.value == "lower_is_better":
        return float(-ci.lo)
    return float(ci.hi)


def aggregate_running(
    store: Store,
    clock: Clock = utc_now,
    *,
    smoke_test: SmokeTest | None = None,
    window: MaintenanceWindow | None = None,
) -> list[dict[str, Any]]:
    """Aggregate every running experiment (the periodic task's body)."""
    return [
        aggregate(store, row.experiment_id, clock, smoke_test=smoke_test, window=window)
        for row in store.experiments.list_experiments(status=ExperimentStatus.RUNNING)
    ]


def stored_results(row: Experiment) -> dict[str, Any]:
    """The last aggregation, or an empty look for an experiment never aggregated."""
    if row.results:
        return dict(row.results) | {"status": row.status}
    return {
        "experiment_id": row.experiment_id,
        "name": row.name,
        "status": row.status,
        "primary_metric": row.primary_metric,
        "metrics": {},
        "p_value": {"always_valid": None, "welch": None},
        "samples": {"control": row.control_sample, "treatment": row.treatment_sample},
        "recommendation": Recommendation.CONTINUE,
        "auto_promote_at": row.auto_promote_at.isoformat() if row.auto_promote_at else None,
    }
