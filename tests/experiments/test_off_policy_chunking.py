"""A collection-wide chunk size whose fit qualified it (its Bonferroni-corrected gain interval above 0
on the pooled chunking failures) goes current on the golden check, like a retrieval refit; one the
fit did not qualify, a smaller size, or a candidate that changes more than chunking takes the
experiment path, and a golden refusal keeps it off."""

from __future__ import annotations

from typing import Any

import pytest

from ragloop.config import PipelineConfig
from ragloop.experiments.auto import AutoExperimentSettings, AutoOutcome, GoldenVerdict, auto_experiment_step
from ragloop.experiments.off_policy import CHUNKING_ACTION
from ragloop.experiments.registry import running_experiment
from ragloop.improve.remediation.chunking import ALPHA, fit_sizes
from ragloop.store import Store
from tests.experiments.test_off_policy import Golden, measured_candidate, promoted_off_policy
from tests.store.conftest import FakeClock

SETTINGS = AutoExperimentSettings(traffic_split=0.5, min_sample_size=30, min_duration_s=3600)
KIND = "chunking_buffer"
DEGRADED = PipelineConfig.model_validate({"chunking": {"size": 200, "overlap": 30}, "retrieval": {"k": 2}})
SIZES = ((320, 48), (512, 77))


def _trials(found_at_512: int, n: int = 20) -> list[dict[str, Any]]:
    """The fit as `ChunkingBufferAction.apply` records it: no pooled sentence whole at 200 or 320,
    `found_at_512` of them whole at 512."""
    found = {320: 0, 512: found_at_512}
    afters = [[1.0] * found[size] + [0.0] * (n - found[size]) for size, _ in SIZES]
    return [t.to_json() for t in fit_sizes(SIZES, [0.0] * n, afters, resamples=400).trials]


def _setup(
    store: Store, found: int, chunking: dict[str, object], extra: dict[str, Any] | None = None
) -> tuple[str, str]:
    cfg = DEGRADED.with_overrides(chunking=chunking, **(extra or {}))
    evidence = {"items": 20, "documents": 12, "alpha": ALPHA / len(SIZES), "trials": _trials(found)}
    evidence["serving"] = {"size": 200, "overlap": 30}
    return measured_candidate(store, DEGRADED, cfg, KIND, CHUNKING_ACTION, evidence)


def test_a_qualified_chunk_size_goes_current_on_the_golden_check(store: Store, clock: FakeClock) -> None:
    assert _trials(15)[1]["gain"]["lo"] > 0 and _trials(15)[1]["qualifies"]
    activated = promoted_off_policy(store, clock, *_setup(store, 15, {"size": 512, "overlap": 77}))
    evidence = activated.evidence["off_policy"]
    assert evidence["route"] == "chunking_fit" and evidence["trial"]["size"] == 512 and evidence["items"] == 20


def test_a_golden_refusal_keeps_it_off(store: Store, clock: FakeClock) -> None:
    current, cand = _setup(store, 15, {"size": 512, "overlap": 77})
    step = auto_experiment_step(store, Golden(passed=False), settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.REFUSED, cand)
    assert store.pipelines.current().version_id == current  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "case", ["not-qualified", "interval-only", "size-not-tried", "other-overlap", "smaller", "more-than-chunking"]
)
def test_other_chunking_candidates_take_the_experiment_path(store: Store, clock: FakeClock, case: str) -> None:
    found, extra = 15, None
    chunking: dict[str, object] = {"size": 512, "overlap": 77}
    if case == "not-qualified":
        found = 2  # 2 of 20 whole: the corrected interval reaches 0
        assert _trials(found)[1]["gain"]["lo"] <= 0
    elif case == "interval-only":
        found = 5  # 5 of 20 whole, none lost: the interval is above 0, the exact p (1/32) above 0.025
        trial = _trials(found)[1]
        assert trial["gain"]["lo"] > 0 and trial["p_family"] > ALPHA / 2 and not trial["qualifies"]
    elif case == "size-not-tried":
        chunking = {"size": 819, "overlap": 123}
    elif case == "other-overlap":
        chunking = {"size": 512, "overlap": 100}
    elif case == "smaller":
        chunking = {"size": 120, "overlap": 18}
    else:
        extra = {"agent": {"refine": False}}
    current, cand = _setup(store, found, chunking, extra)
    step = auto_experiment_step(store, Golden(), settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.STARTED, cand)
    assert store.pipelines.current().version_id == current  # type: ignore[union-attr]


def test_evidence_committed_while_the_golden_check_runs_still_counts(store: Store, clock: FakeClock) -> None:
    """A remediation registers its candidate before the scheduler commits the entry with its
    measurement; an auto step that picked the candidate up in between promotes it once the check has
    run, instead of starting an experiment the measured candidate cannot win."""
    current = store.pipelines.register_config(DEGRADED)
    store.pipelines.activate(current.version_id, reason="test")
    cfg = DEGRADED.with_overrides(chunking={"size": 512, "overlap": 77})
    cand = store.pipelines.register_config(
        cfg, parent_version_id=current.version_id, created_by=f"remediation:{KIND}", description=KIND
    ).version_id
    evidence = {"domain": "kb", "items": 20, "alpha": ALPHA / len(SIZES), "trials": _trials(15)}

    class LateEvidence(Golden):
        def __call__(self, current: str, candidate: str) -> GoldenVerdict:
            store.audit.record(
                CHUNKING_ACTION,
                triggered_by="action:test",
                actor="scheduler",
                evidence=evidence,
                pipeline_version_before=current,
                pipeline_version_after=candidate,
            )
            return super().__call__(current, candidate)

    step = auto_experiment_step(store, LateEvidence(), settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.PROMOTED, cand)
    assert running_experiment(store) is None
