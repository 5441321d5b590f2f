"""What a pipeline switch did to live answers: the *actual* delta of an activation, beside the
*expected* one its evidence promised.

A switch (`pipeline_activate`: an experiment's promotion, a measured candidate made current on the
golden check, an admin's activation) records the evidence it was made on; when that evidence is a
measured difference it also records it as the entry's `expected_delta` (`golden_expectation`,
`experiment_expectation`). Once the new version has been current for `window_s` on the loop's clock
(24 h by default, the remediation auditor's window), `audit_activations` compares the answers the
new version served in `[switch, switch + window)` with the answers the version it replaced served
in `[switch - window, switch)`, per metric the online evaluation gives every answer or a share of
them (`METRICS`: tier-1 score, users' ratings, refusal rate), as a difference of means with Welch's
95% interval (session-clustered: a window holds whole conversations, whose turns share a topic and
its answerability) and both sample sizes, and records it as a `pipeline_activate_audit` entry whose
`refers_to` is the activation and whose `actual_delta` is the measurement (`expected_delta` copied,
so one row reads "promised vs got").

It decides nothing, on purpose: the two windows serve different questions to different users, so
an online difference mixes the change with the traffic, and a rollback rests on the nightly
regression's paired golden-set comparison (`regression`). Each activation is measured once: the
check and the write share one serialised transaction, so two workers never both record it. It is
measured once tier 1 has scored every answer in both windows, or one window later with the answers
still unscored counted in the entry (`unscored`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from ragloop.experiments.metrics import Metric
from ragloop.experiments.scores import ArmScores, answer_scores
from ragloop.experiments.stats import ArmSummary, welch

if TYPE_CHECKING:
    from ragloop.store import ImprovementAuditLog, Store

ACTION = "pipeline_activate_audit"
ACTIVATION = "pipeline_activate"
WINDOW_S = 86_400.0
METRICS = (Metric.TIER1_SCORE, Metric.USER_RATING, Metric.REFUSAL_RATE)


@dataclass(frozen=True)
class MetricDelta:
    metric: Metric
    before: ArmSummary
    after: ArmSummary
    lo: float | None
    hi: float | None
    """Welch's 95% interval on after - before; None with fewer than 2 scores on a side."""

    @property
    def difference(self) -> float | None:
        return self.after.mean - self.before.mean if self.before.n and self.after.n else None

    def to_json(self) -> dict[str, Any]:
        diff = self.difference
        return {
            "n_before": self.before.n,
            "n_after": self.after.n,
            "sessions_before": self.before.units,
            "sessions_after": self.after.units,
            "before": round(self.before.mean, 6) if self.before.n else None,
            "after": round(self.after.mean, 6) if self.after.n else None,
            "difference": round(diff, 6) if diff is not None else None,
            "ci95": [round(self.lo, 6), round(self.hi, 6)] if self.lo is not None and self.hi is not None else None,
        }


def _delta(metric: Metric, before: ArmScores, after: ArmScores) -> MetricDelta:
    b, a = before.summary(metric), after.summary(metric)
    if b.independent < 2 or a.independent < 2:
        return MetricDelta(metric, b, a, None, None)
    ci = welch(b, a).ci
    return MetricDelta(metric, b, a, ci.lo, ci.hi)


def _served(store: Store, version: str, start: datetime, end: datetime) -> ArmScores:
    from ragloop.store.models import Answer

    where = (Answer.pipeline_version == version, Answer.created_at >= start, Answer.created_at < end)
    return answer_scores(store, where, lambda _variant: "all").get("all", ArmScores())


def _windows(
    store: Store, before_version: str, after_version: str, at: datetime, window_s: float
) -> tuple[ArmScores, ArmScores]:
    """What `before_version` served in the window before `at`, and `after_version` in the one after."""
    w = timedelta(seconds=window_s)
    return _served(store, before_version, at - w, at), _served(store, after_version, at, at + w)


def _unscored(arm: ArmScores) -> int:
    """Answers in the window that tier 1 has not scored yet (its queue lags behind serving)."""
    return arm.answers - len(arm.scores.get(Metric.TIER1_SCORE, []))


def golden_expectation(golden: Mapping[str, Any]) -> dict[str, Any] | None:
    """The golden check's paired `answer_correct` difference (a `GoldenVerdict.detail`) as an
    expected delta, with every gate's difference beside it; None when it measured none."""
    metrics = {m.get("metric"): m for m in golden.get("metrics", []) if isinstance(m, Mapping)}
    correct = metrics.get("answer_correct")
    if correct is None:
        return None
    return {
        "metric": "answer_correct",
        "value": correct.get("difference"),
        "ci95": correct.get("ci95"),
        "n": correct.get("n"),
        "from": "golden check (paired, working golden set)",
        "gates": {str(k): v.get("difference") for k, v in metrics.items()},
    }


def experiment_expectation(results: Mapping[str, Any]) -> dict[str, Any] | None:
    """An experiment's primary-metric difference (its stored results) as an expected delta."""
    primary = results.get("primary_metric")
    cmp = (results.get("metrics") or {}).get(primary) if primary else None
    if not isinstance(cmp, Mapping) or cmp.get("difference") is None:
        return None
    ci = cmp.get("always_valid_ci") or {}
    return {
        "metric": primary,
        "value": cmp.get("difference"),
        "ci95": [ci.get("lo"), ci.get("hi")],
        "n": (cmp.get("treatment") or {}).get("n"),
        "from": "experiment (always-valid interval)",
    }


def delta_text(d: Mapping[str, Any] | None) -> str | None:
    """One measured difference (an expected or actual delta) as `metric +value [lo, hi] n=...`;
    None when `d` is not one."""
    if not d or not d.get("metric") or not isinstance(d.get("value"), int | float):
        return None
    ci = d.get("ci95") or []
    interval = f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if len(ci) == 2 and None not in ci else ""
    n = f" n={d['n']}" if d.get("n") is not None else ""
    sessions = f" in {d['sessions']} sessions" if d.get("sessions") is not None else ""
    late = f", {d['unscored']} not yet scored" if any(d.get("unscored") or []) else ""
    return f"{d['metric']} {d['value']:+.3f}{interval}{n}{sessions}{late}"


class Switch(BaseModel):
    """A switch of the current version: the delta it was expected to bring (the golden check's or an
    experiment's measured difference) and, once its window has passed, the one measured on live answers
    (`GET /v1/pipeline/switches`, `ragloop pipeline switches`)."""

    model_config = ConfigDict(frozen=True)

    log_id: str
    at: datetime
    version_before: str | None
    version_after: str | None
    triggered_by: str
    expected_delta: dict[str, Any] | None
    actual_delta: dict[str, Any] | None


def switches(store: Store, limit: int = 1000) -> list[Switch]:
    """Every activation, oldest first, each with its measurement when there is one."""
    measured = {e.refers_to: e for e in store.audit.timeline(action_type=ACTION, limit=limit)}
    return [
        Switch(
            log_id=e.log_id,
            at=e.created_at,
            version_before=e.pipeline_version_before,
            version_after=e.pipeline_version_after,
            triggered_by=e.triggered_by,
            expected_delta=e.expected_delta,
            actual_delta=m.actual_delta if (m := measured.get(e.log_id)) is not None else None,
        )
        for e in reversed(store.audit.timeline(action_type=ACTIVATION, limit=limit))
    ]


def audit_activations(
    store: Store,
    now: Callable[[], datetime],
    *,
    window_s: float = WINDOW_S,
    actor: str = "activation-audit",
    limit: int = 200,
) -> list[ImprovementAuditLog]:
    """Measure every activation whose window has passed and that has no audit entry yet. While tier
    1 has not scored every answer of both windows the measurement waits, for at most one more
    window; then it is taken with what is there, and the unscored answers are recorded beside n
    (the scores that are late need not be like those that are in)."""
    cutoff = now() - timedelta(seconds=window_s)
    done = {e.refers_to for e in store.audit.timeline(action_type=ACTION, limit=10_000)}
    due = [
        e
        for e in store.audit.timeline(action_type=ACTIVATION, limit=limit)
        if e.log_id not in done and e.pipeline_version_before and e.pipeline_version_after and e.created_at <= cutoff
    ]
    recorded = []
    for entry in reversed(due):  # oldest first
        before, after = entry.pipeline_version_before, entry.pipeline_version_after
        assert before is not None and after is not None
        windows = _windows(store, before, after, entry.created_at, window_s)
        unscored = [_unscored(w) for w in windows]
        if any(unscored) and entry.created_at > cutoff - timedelta(seconds=window_s):
            continue  # tier 1 is still scoring this switch's answers
        actual = {m.value: _delta(m, *windows).to_json() for m in METRICS}
        tier1 = actual[Metric.TIER1_SCORE.value]
        actual_delta = {
            "metric": Metric.TIER1_SCORE.value,
            "value": tier1["difference"],
            "ci95": tier1["ci95"],
            "n": [tier1["n_before"], tier1["n_after"]],
            "sessions": [tier1["sessions_before"], tier1["sessions_after"]],
            "unscored": unscored,
        }
        row = store.audit.record_once(
            ACTION,
            refers_to=entry.log_id,
            triggered_by=f"activation {entry.log_id}",
            actor=actor,
            evidence={
                "window_s": window_s,
                "note": "online, not paired: the windows serve different questions; decides nothing",
            },
            pipeline_version_before=before,
            pipeline_version_after=after,
            expected_delta=entry.expected_delta,
            actual_delta=actual_delta | {"metrics": actual},
        )
        if row is not None:
            recorded.append(row)
    return recorded
