"""An answer check whose fit measured a gain on labelled traffic goes current on the golden check;
one that changes more than the check, or whose fit started from another threshold than the one
serving, takes the experiment path."""

from __future__ import annotations

import pytest

from ragloop.config import PipelineConfig
from ragloop.experiments.auto import AutoOutcome, auto_experiment_step
from ragloop.experiments.off_policy import CHECK_ACTION
from ragloop.improve.remediation.thresholds import fit_tau_lower
from ragloop.store import Store
from tests.experiments.test_off_policy import SETTINGS, Golden, _raise_samples, measured_candidate
from tests.store.conftest import FakeClock

READER = "llm:local:qwen2.5-coder-1.5b"
KIND = "answer_check"


def _setup(store: Store, base: PipelineConfig, current: float, extra: dict[str, object] | None = None) -> str:
    fit = fit_tau_lower(_raise_samples(), current=current)
    assert fit.off_policy
    cfg = base.with_overrides(agent={"tau_answer": fit.fitted, "scorers": {"answer_check": READER}, **(extra or {})})
    evidence = {"fit": fit.to_json(), "scorer": READER}
    return measured_candidate(store, base, cfg, KIND, CHECK_ACTION, evidence)[1]


def test_a_measured_check_goes_current_on_the_golden_check(store: Store, clock: FakeClock) -> None:
    cand = _setup(store, PipelineConfig(), 0.0)
    golden = Golden()
    step = auto_experiment_step(store, golden, settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate, golden.calls) == (AutoOutcome.PROMOTED, cand, 1)
    row = store.pipelines.current()
    assert row is not None and row.version_id == cand and row.promoted_via == "remediation"
    assert step.detail["off_policy"]["route"] == "answer_check"


@pytest.mark.parametrize(
    ("base", "current", "extra"),
    [
        (PipelineConfig(), 0.0, {"tau_lower": 0.35}),  # more than the check changes
        (PipelineConfig().with_overrides(agent={"tau_answer": 0.2, "scorers": {"answer_check": READER}}), 0.0, None),
    ],
    ids=["more-than-the-check", "fitted-from-another-threshold"],
)
def test_other_check_candidates_take_the_experiment_path(
    store: Store, clock: FakeClock, base: PipelineConfig, current: float, extra: dict[str, object] | None
) -> None:
    cand = _setup(store, base, current, extra)
    step = auto_experiment_step(store, Golden(), settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.STARTED, cand)
