"""A τL raise whose gain the refit measured on labelled traffic goes current on the golden check,
without an experiment; a lowering, a refused golden check, a closed window or a candidate changing
more than the gate keep it off that path."""

from __future__ import annotations

from typing import Any

import pytest

from ragloop.config import PipelineConfig
from ragloop.experiments.auto import (
    SOURCE_PREFIX,
    AutoExperimentSettings,
    AutoOutcome,
    GoldenVerdict,
    auto_experiment_step,
)
from ragloop.experiments.off_policy import REFIT_ACTION
from ragloop.experiments.promotion import MaintenanceWindow
from ragloop.experiments.registry import running_experiment
from ragloop.improve.remediation.thresholds import GateSample, fit_tau_lower
from ragloop.store import ImprovementAuditLog, Store
from tests.store.conftest import FakeClock

SETTINGS = AutoExperimentSettings(traffic_split=0.5, min_sample_size=30, min_duration_s=3600)
KIND = "threshold_recalibration"


class Golden:
    def __init__(self, passed: bool = True) -> None:
        self.passed, self.calls = passed, 0

    def __call__(self, current: str, candidate: str) -> GoldenVerdict:
        self.calls += 1
        gain = {"metric": "answer_correct", "n": 30, "difference": 0.1, "ci95": [0.02, 0.18], "regressed": False}
        return GoldenVerdict(
            self.passed, {"entries": 32, "regressed": [] if self.passed else ["answer_correct"], "metrics": [gain]}
        )


def _raise_samples() -> list[GateSample]:
    """Unanswerable questions answered at 0.30-0.49, answerable ones at 0.60-0.95 (right 4 in 5)."""
    out = [GateSample(score=0.30 + 0.2 * i / 15, answer_right=0.0, refusal_right=1.0) for i in range(15)]
    out += [
        GateSample(score=0.60 + 0.35 * i / 15, answer_right=float(i % 5 != 0), refusal_right=0.0) for i in range(15)
    ]
    return out


def _lower_samples() -> list[GateSample]:
    out = [GateSample(score=0.1 + 0.01 * i, answer_right=0.6, refusal_right=0.0) for i in range(20)]
    return out + [GateSample(score=0.5 + 0.01 * i, answer_right=1.0, refusal_right=0.0) for i in range(30)]


def measured_candidate(
    store: Store, base: PipelineConfig, cfg: PipelineConfig, kind: str, action: str, evidence: dict[str, Any]
) -> tuple[str, str]:
    """`base` as the current version, and `cfg` as the candidate remediation `kind` registered on it,
    with the `action` audit entry (its measurement) as the remediation writes it: (current, candidate)."""
    current = store.pipelines.register_config(base)
    store.pipelines.activate(current.version_id, reason="test")
    cand = store.pipelines.register_config(
        cfg, parent_version_id=current.version_id, created_by=f"{SOURCE_PREFIX}{kind}", description=kind
    )
    store.audit.record(
        action,
        triggered_by="action:test",
        actor="scheduler",
        evidence={"domain": "kb", **evidence, "candidate_version": cand.version_id},
        pipeline_version_before=current.version_id,
        pipeline_version_after=cand.version_id,
    )
    return current.version_id, cand.version_id


def promoted_off_policy(store: Store, clock: FakeClock, current: str, cand: str) -> ImprovementAuditLog:
    """One auto step with a passing golden check: `cand` must go current after `current` on that check
    alone (no experiment); its activation's audit entry."""
    golden = Golden()
    step = auto_experiment_step(store, golden, settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate, golden.calls) == (AutoOutcome.PROMOTED, cand, 1)
    row = store.pipelines.current()
    assert row is not None and row.version_id == cand and row.promoted_via == "remediation"
    assert row.previous_version_id == current
    [activated] = [e for e in store.audit.timeline(action_type="pipeline_activate") if e.pipeline_version_after == cand]
    return activated


def _setup(
    store: Store, samples: list[GateSample], extra: dict[str, dict[str, object]] | None = None
) -> tuple[str, str]:
    """The current version (τL 0.3), and the candidate the refit on `samples` made, audited as the
    τL refit audits it."""
    fit = fit_tau_lower(samples, current=0.3)
    assert fit.improves
    cfg = PipelineConfig().with_overrides(agent={"tau_lower": fit.fitted}, **(extra or {}))
    return measured_candidate(store, PipelineConfig(), cfg, KIND, REFIT_ACTION, {"fit": fit.to_json()})


def test_a_measured_raise_goes_current_on_the_golden_check(store: Store, clock: FakeClock) -> None:
    activated = promoted_off_policy(store, clock, *_setup(store, _raise_samples()))
    assert activated.evidence["off_policy"]["fit"]["direction"] == "raise"
    assert activated.evidence["golden"]["entries"] == 32
    # the golden check's measured gain is the switch's expected delta (the activation audit's "expected")
    expected = activated.expected_delta or {}
    assert (expected["metric"], expected["value"], expected["ci95"], expected["n"]) == (
        "answer_correct",
        0.1,
        [0.02, 0.18],
        30,
    )
    assert running_experiment(store) is None  # no experiment was needed
    assert auto_experiment_step(store, Golden(), settings=SETTINGS, clock=clock).outcome is AutoOutcome.IDLE


def test_a_raise_refused_by_the_golden_set_never_goes_current(store: Store, clock: FakeClock) -> None:
    current, cand = _setup(store, _raise_samples())
    step = auto_experiment_step(store, Golden(passed=False), settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.REFUSED, cand)
    assert store.pipelines.current().version_id == current  # type: ignore[union-attr]
    assert auto_experiment_step(store, Golden(), settings=SETTINGS, clock=clock).outcome is AutoOutcome.IDLE


def test_a_raise_waits_for_the_promotion_window(store: Store, clock: FakeClock) -> None:
    _, cand = _setup(store, _raise_samples())
    hour = clock().hour
    shut = MaintenanceWindow((hour + 2) % 24, (hour + 3) % 24)
    golden = Golden()
    step = auto_experiment_step(store, golden, settings=SETTINGS, clock=clock, window=shut)
    assert (step.outcome, golden.calls) == (AutoOutcome.AWAITING_WINDOW, 0)
    open_now = MaintenanceWindow(hour, (hour + 1) % 24 or 24)
    assert auto_experiment_step(store, golden, settings=SETTINGS, clock=clock, window=open_now).outcome is (
        AutoOutcome.PROMOTED
    )
    assert store.pipelines.current().version_id == cand  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("samples", "extra", "settings"),
    [
        (_lower_samples, None, SETTINGS),  # a lowering: its gain is imputed, not measured
        (_raise_samples, {"retrieval": {"k": 3}}, SETTINGS),  # more than the gate changes
        (_raise_samples, None, AutoExperimentSettings(traffic_split=0.5, min_sample_size=30, off_policy=False)),
    ],
    ids=["lowering", "more-than-the-gate", "off-policy-off"],
)
def test_other_candidates_take_the_experiment_path(
    store: Store,
    clock: FakeClock,
    samples: object,
    extra: dict[str, dict[str, object]] | None,
    settings: AutoExperimentSettings,
) -> None:
    current, cand = _setup(store, samples(), extra)  # type: ignore[operator]
    step = auto_experiment_step(store, Golden(), settings=settings, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.STARTED, cand)
    assert store.pipelines.current().version_id == current  # type: ignore[union-attr]
