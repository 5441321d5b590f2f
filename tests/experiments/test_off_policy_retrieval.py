"""A retrieval refit (mode / fusion / a larger k) whose cross-fitted gain interval lies above 0 goes
current on the golden check, like a measured τL raise; one whose interval includes 0, that lowers k
or changes more than retrieval takes the experiment path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ragloop.config import PipelineConfig
from ragloop.config.pipeline import RetrievalConfig
from ragloop.experiments.auto import AutoExperimentSettings, AutoOutcome, auto_experiment_step
from ragloop.experiments.off_policy import RETRIEVAL_REFIT_ACTION
from ragloop.improve.remediation.ranking import RankingTuple, fit_fusion
from ragloop.improve.remediation.topk import fit_top_k
from ragloop.store import Store
from tests.experiments.test_off_policy import Golden, measured_candidate, promoted_off_policy
from tests.store.conftest import FakeClock

SETTINGS = AutoExperimentSettings(traffic_split=0.5, min_sample_size=30, min_duration_s=3600)
KIND = "ranking_buffer"
DEGRADED = PipelineConfig.model_validate({"retrieval": {"mode": "dense", "k": 2}})


def _tuples(n: int) -> list[RankingTuple]:
    return [RankingTuple(query=f"q{i}", chunk_id=f"c{i}", rank=None) for i in range(n)]


def _rr(ranks_by_mode: dict[str, Sequence[int]]):
    """Reciprocal ranks per query under each retrieval mode (weights do not matter here)."""

    def rr_of(cfg: RetrievalConfig, query: str, chunk_ids: Sequence[str]) -> list[float]:
        return [1.0 / ranks_by_mode[cfg.mode][int(query[1:])] for _ in chunk_ids]

    return rr_of


def _fits(ranks_by_mode: dict[str, Sequence[int]], n: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The refit as `RankingBufferAction.apply` runs it: fusion / mode first, then k on the chosen
    retrieval; (fit, top_k, overrides)."""
    tuples, rr_of = _tuples(n), _rr(ranks_by_mode)
    fit = fit_fusion(tuples, DEGRADED.retrieval, rr_of, resamples=300)
    over: dict[str, Any] = {}
    if fit.improves:
        over["mode"] = fit.mode
        if fit.mode == "hybrid":
            over["fusion"] = {"method": "weighted", "dense_weight": fit.dense_weight}
    chosen = DEGRADED.with_overrides(retrieval=over).retrieval if over else DEGRADED.retrieval
    k_fit = fit_top_k(tuples, chosen, rr_of, resamples=300)
    if k_fit.improves:
        over["k"] = k_fit.fitted
    return fit.to_json(), k_fit.to_json(), over


def _setup(
    store: Store,
    fit: dict[str, Any],
    top_k: dict[str, Any],
    over: dict[str, Any],
    *,
    extra: dict[str, Any] | None = None,
) -> tuple[str, str]:
    cfg = DEGRADED.with_overrides(retrieval=over, **(extra or {}))
    evidence = {"fit": fit, "top_k": top_k, "overrides": over}
    return measured_candidate(store, DEGRADED, cfg, KIND, RETRIEVAL_REFIT_ACTION, evidence)


def _just_below_k(n: int = 30) -> dict[str, Sequence[int]]:
    """Dense puts every oracle chunk at rank 3-4 (just below k=2); BM25 and hybrid no better."""
    ranks = [3 + i % 2 for i in range(n)]
    return {"dense": ranks, "hybrid": [r + 2 for r in ranks], "bm25": [r + 5 for r in ranks]}


def test_a_measured_larger_k_goes_current_on_the_golden_check(store: Store, clock: FakeClock) -> None:
    fit, top_k, over = _fits(_just_below_k(), 30)
    assert over == {"k": 4} and top_k["gain"]["lo"] > 0
    activated = promoted_off_policy(store, clock, *_setup(store, fit, top_k, over))
    row = store.pipelines.current()
    assert row is not None and row.config["retrieval"]["k"] == 4
    assert activated.evidence["off_policy"]["top_k"]["fitted"] == 4


def test_a_measured_mode_change_goes_current(store: Store, clock: FakeClock) -> None:
    n = 30
    ranks = {"dense": [40] * n, "hybrid": [1] * n, "bm25": [20] * n}  # hybrid finds what dense misses
    fit, top_k, over = _fits(ranks, n)
    assert over.get("mode") == "hybrid" and fit["held_out_gain"]["lo"] > 0
    _, cand = _setup(store, fit, top_k, over)
    assert auto_experiment_step(store, Golden(), settings=SETTINGS, clock=clock).outcome is AutoOutcome.PROMOTED
    assert store.pipelines.current().config["retrieval"]["mode"] == "hybrid"  # type: ignore[union-attr]
    assert store.pipelines.current().version_id == cand  # type: ignore[union-attr]


def test_a_golden_refusal_keeps_it_off(store: Store, clock: FakeClock) -> None:
    fit, top_k, over = _fits(_just_below_k(), 30)
    current, cand = _setup(store, fit, top_k, over)
    step = auto_experiment_step(store, Golden(passed=False), settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.REFUSED, cand)
    assert store.pipelines.current().version_id == current  # type: ignore[union-attr]


def _unmeasured(fit: dict[str, Any], top_k: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same fit with its k interval reaching 0 (as a small buffer gives)."""
    return fit, {**top_k, "gain": {**top_k["gain"], "lo": 0.0}}


@pytest.mark.parametrize("case", ["interval-includes-0", "interval-only", "k-lowered", "more-than-retrieval"])
def test_other_retrieval_candidates_take_the_experiment_path(store: Store, clock: FakeClock, case: str) -> None:
    fit, top_k, over = _fits(_just_below_k(), 30)
    extra = None
    if case == "interval-includes-0":
        fit, top_k = _unmeasured(fit, top_k)
    elif case == "interval-only":  # the interval above 0, the exact test not agreeing
        top_k = {**top_k, "gain": {**top_k["gain"], "p": 0.03}}
        assert top_k["gain"]["lo"] > 0
    elif case == "k-lowered":
        over = {"k": 1}
    else:
        extra = {"agent": {"refine": False}}
    current, cand = _setup(store, fit, top_k, over, extra=extra)
    step = auto_experiment_step(store, Golden(), settings=SETTINGS, clock=clock)
    assert (step.outcome, step.candidate) == (AutoOutcome.STARTED, cand)
    assert store.pipelines.current().version_id == current  # type: ignore[union-attr]


def test_five_queries_that_all_gain_do_not_show_a_gain() -> None:
    """Every one of 5 diagnosed queries gains from k 4: the percentile interval is [1, 1], but the
    exact one-sided p is 2^-5 = 0.031 > 0.025, so the refit proposes no k (with 6: 0.016, it does)."""
    _, top_k, over = _fits(_just_below_k(5), 5)
    assert top_k["gain"]["lo"] > 0 and top_k["gain"]["p"] == pytest.approx(1 / 32) and "k" not in over
    _, top_k, over = _fits(_just_below_k(6), 6)
    assert top_k["gain"]["p"] == pytest.approx(1 / 64) and over.get("k") == 4
    fit, _, over = _fits({"dense": [40] * 5, "hybrid": [1] * 5, "bm25": [20] * 5}, 5)  # the same for a mode
    assert fit["held_out_gain"]["lo"] > 0 and fit["held_out_gain"]["p"] == pytest.approx(1 / 32)
    assert "mode" not in over
