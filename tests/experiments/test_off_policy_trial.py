"""An answer-graph variant whose golden trial measured a correctness gain (corrected interval above 0)
goes current on the golden check; one chosen by faithfulness alone, one whose candidate carries more
than the trial's overrides, and one the golden check refuses do not."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ragloop.config import PipelineConfig
from ragloop.experiments.auto import AutoExperimentSettings, AutoOutcome, auto_experiment_step
from ragloop.experiments.off_policy import TRIAL_ACTION
from ragloop.improve.remediation.prompts import ItemScore, PromptTrial, compare
from ragloop.store import Store
from tests.experiments.test_off_policy import Golden, measured_candidate, promoted_off_policy
from tests.store.conftest import FakeClock

SETTINGS = AutoExperimentSettings(traffic_split=0.5, min_sample_size=30, min_duration_s=3600)
REFINE_OFF = {"agent": {"refine": False}}
N = 80


def _scores(correct: list[int], faith: float = 0.8) -> list[ItemScore]:
    return [ItemScore(faith, 0.5, float(c)) for c in correct]


def _trial(base: list[ItemScore], var: list[ItemScore], n_variants: int = 6) -> PromptTrial:
    """The trial as `run_trial` reports it, its level corrected for `n_variants` variants."""
    alpha = 0.05 / (2 * n_variants)
    result = replace(compare("refine-off", base, var, alpha=alpha, resamples=2000, seed=7), overrides=REFINE_OFF)
    return PromptTrial("v1", len(base), alpha, 0.02, [result])


def _correctness_gain() -> PromptTrial:
    """Refinement off answers 20 of 80 entries right that the serving config got wrong, loses 2."""
    base = [1] * 24 + [0] * 20 + [1] * 2 + [0] * 34
    var = [1] * 24 + [1] * 20 + [0] * 2 + [0] * 34
    return _trial(_scores(base), _scores(var))


def _setup(store: Store, trial: PromptTrial, extra: dict[str, Any] | None = None) -> tuple[str, str]:
    cfg = PipelineConfig().with_overrides(agent={"refine": False}, **(extra or {}))
    return measured_candidate(
        store, PipelineConfig(), cfg, "prompt_candidate", TRIAL_ACTION, {"trial": trial.to_json()}
    )


def test_a_trial_measured_correctness_gain_goes_current(store: Store, clock: FakeClock) -> None:
    trial = _correctness_gain()
    assert trial.chosen is not None and trial.chosen.correct_lo > 0
    activated = promoted_off_policy(store, clock, *_setup(store, trial))
    off = activated.evidence["off_policy"]
    assert off["route"] == "answer_trial" and off["variant"]["version"] == "refine-off"
    assert off["variant"]["correct_gain"] == pytest.approx(18 / N, abs=1e-6)
    assert activated.triggered_by.startswith("golden-trial correctness gain")


def test_a_golden_refusal_keeps_it_off(store: Store, clock: FakeClock) -> None:
    current, cand = _setup(store, _correctness_gain())
    step = auto_experiment_step(store, Golden(passed=False), settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.REFUSED, cand)
    assert store.pipelines.current().version_id == current  # type: ignore[union-attr]


def _faithfulness_only() -> PromptTrial:
    """Correctness unchanged; faithfulness 0.5 -> 0.9 on every entry: qualifies by faithfulness."""
    correct = [1] * 30 + [0] * 50
    base = [ItemScore(0.5 + 0.01 * (i % 5), 0.5, float(c)) for i, c in enumerate(correct)]
    var = [ItemScore(0.9 + 0.01 * (i % 5), 0.5, float(c)) for i, c in enumerate(correct)]
    return _trial(base, var)


def _faithfulness_and_noisy_correctness() -> PromptTrial:
    """Faithfulness 0.5 -> 0.9; correctness +3 right, 1 lost (a 2.5-point gain, interval through 0):
    chosen by faithfulness, and its correctness gain is not measured."""
    base = [1] * 24 + [0] * 3 + [1] + [0] * 52
    var = [1] * 24 + [1] * 3 + [0] + [0] * 52
    return _trial(
        [ItemScore(0.5, 0.5, float(c)) for c in base],
        [ItemScore(0.9 + 0.001 * i, 0.5, float(c)) for i, c in enumerate(var)],
    )


def _small_gain() -> PromptTrial:
    """+5 of 80 right, 3 lost: the uncorrected interval may clear 0, the corrected one does not."""
    base = [1] * 24 + [0] * 5 + [1] * 3 + [0] * 48
    var = [1] * 24 + [1] * 5 + [0] * 3 + [0] * 48
    return _trial(_scores(base), _scores(var))


@pytest.mark.parametrize(
    "case", ["faithfulness-only", "faithfulness-and-noisy-correctness", "more-than-the-trial", "not-significant"]
)
def test_other_answer_graph_candidates_take_the_experiment_path(store: Store, clock: FakeClock, case: str) -> None:
    extra = None
    if case == "faithfulness-only":
        trial = _faithfulness_only()
        assert trial.chosen is not None and trial.chosen.correct_gain == 0.0
    elif case == "faithfulness-and-noisy-correctness":
        trial = _faithfulness_and_noisy_correctness()
        assert trial.chosen is not None and trial.chosen.correct_gain > 0.02 >= trial.chosen.correct_lo
    elif case == "more-than-the-trial":
        trial, extra = _correctness_gain(), {"retrieval": {"k": 8}}
    else:
        trial = _small_gain()
        [variant] = trial.variants
        assert variant.correct_lo <= 0.0 and trial.chosen is None
    current, cand = _setup(store, trial, extra)
    step = auto_experiment_step(store, Golden(), settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.STARTED, cand)
    assert store.pipelines.current().version_id == current  # type: ignore[union-attr]
