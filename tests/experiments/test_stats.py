"""The comparison: summaries, Welch against SciPy, the always-valid p-value and interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from ragloop.experiments import (
    ArmSummary,
    SequentialDesign,
    compare,
    mixture_log_e,
    mixture_radius,
    welch,
)
from ragloop.experiments._tdist import critical_values, t_critical, t_two_sided_p
from ragloop.experiments.simulation import Rule, SimulationPlan, first_hits, simulate

DESIGN = SequentialDesign.plan(n_treatment=500, traffic_split=0.05, sd=0.2)


def _scores(rng: np.random.Generator, n: int, mean: float, sd: float = 0.2) -> np.ndarray:
    k = mean * (1 - mean) / sd**2 - 1
    return rng.beta(mean * k, (1 - mean) * k, size=n)


def test_summary_from_sums_matches_scores() -> None:
    x = _scores(np.random.default_rng(1), 300, 0.7)
    a, b = ArmSummary.of(x), ArmSummary.from_sums(x.size, float(x.sum()), float((x * x).sum()))
    assert a.n == b.n == 300
    assert a.mean == pytest.approx(b.mean, rel=1e-12)
    assert a.variance == pytest.approx(b.variance, rel=1e-9)
    assert a.sd == pytest.approx(float(np.std(x, ddof=1)))
    assert ArmSummary.of([]) == ArmSummary(0, 0.0, 0.0)


def test_clustered_summary_is_the_plain_one_when_every_session_holds_one_score() -> None:
    x = _scores(np.random.default_rng(2), 200, 0.6)
    plain, clustered = ArmSummary.of(x), ArmSummary.clustered(x, [f"s{i}" for i in range(x.size)])
    assert (clustered.n, clustered.units, clustered.independent) == (200, 200, 200)
    assert clustered.mean == pytest.approx(plain.mean, rel=1e-12)
    assert clustered.variance == pytest.approx(plain.variance, rel=1e-9)


def test_clustered_variance_of_identical_turns_is_that_of_the_session_means() -> None:
    """Five sessions whose four turns score alike carry five observations, not twenty: the mean's
    variance is the session means' s² / 5, four times what the scores read as independent say."""
    means = [0.2, 0.9, 0.4, 0.7, 0.5]
    scores = [m for m in means for _ in range(4)]
    sessions = [f"s{g}" for g in range(5) for _ in range(4)]
    c = ArmSummary.clustered(scores, sessions)
    assert (c.n, c.units) == (20, 5)
    assert c.variance / c.n == pytest.approx(float(np.var(means, ddof=1)) / 5, rel=1e-9)
    plain = ArmSummary.of(scores)
    assert c.variance / c.n > 3.5 * plain.variance / plain.n
    # Welch counts sessions: its interval is wider and its df at most 5 + 5 - 2
    other = ArmSummary.clustered([s + 0.25 for s in scores], [f"t{g}" for g in range(5) for _ in range(4)])
    w_clustered, w_plain = welch(c, other), welch(plain, ArmSummary.of([s + 0.25 for s in scores]))
    assert w_clustered.df == pytest.approx(8) and w_plain.df > 30
    assert w_clustered.ci.hi - w_clustered.ci.lo > 2 * (w_plain.ci.hi - w_plain.ci.lo)
    assert w_plain.p_value < 0.05 < w_clustered.p_value


def test_clustered_summary_rejects_bad_labels_and_one_session_comparisons() -> None:
    with pytest.raises(ValueError, match="3 scores but 2 unit labels"):
        ArmSummary.clustered([0.1, 0.2, 0.3], ["a", "b"])
    with pytest.raises(ValueError, match="units for"):
        ArmSummary(2, 0.5, 0.1, units=3)
    one = ArmSummary.clustered([0.1, 0.9, 0.5], ["a", "a", "a"])
    assert (one.units, one.variance) == (1, 0.0)
    with pytest.raises(ValueError, match=r"the control arm's scores come from 1 unit\(s\)"):
        welch(one, ArmSummary.of([0.4, 0.6]))
    assert ArmSummary.clustered([], []) == ArmSummary(0, 0.0, 0.0, 0)


@pytest.mark.parametrize("n", [0, 1])
def test_comparison_needs_two_scores_per_arm(n: int) -> None:
    small = ArmSummary.of([0.5] * n)
    big = ArmSummary.of([0.4, 0.6, 0.5])
    with pytest.raises(ValueError, match=rf"the treatment arm has {n} score\(s\); a comparison needs at least 2"):
        compare(big, small, DESIGN)
    with pytest.raises(ValueError, match="the control arm"):
        welch(small, big)


def test_invalid_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="invalid arm summary"):
        ArmSummary(3, 0.5, -1.0)
    with pytest.raises(ValueError, match="finite"):
        ArmSummary.of([0.1, math.nan])
    for split in (0.0, 0.6, -0.1, math.nan):
        with pytest.raises(ValueError, match=r"traffic_split must lie in \(0, 0.5\]"):
            SequentialDesign.plan(traffic_split=split)
    with pytest.raises(ValueError, match="alpha"):
        SequentialDesign.plan(alpha=1.5)
    with pytest.raises(ValueError, match="rho must be > 0"):
        SequentialDesign()
    with pytest.raises(ValueError, match="burn_in"):
        SequentialDesign.plan(burn_in=1)


def test_welch_matches_scipy() -> None:
    rng = np.random.default_rng(7)
    for n_c, n_t, shift in ((40, 12, 0.0), (900, 60, 0.05), (5000, 250, -0.02)):
        c, t = _scores(rng, n_c, 0.65), _scores(rng, n_t, 0.65 + shift, 0.15)
        got = welch(ArmSummary.of(c), ArmSummary.of(t))
        ref = scipy.stats.ttest_ind(t, c, equal_var=False)
        assert got.t == pytest.approx(ref.statistic, rel=1e-9)
        assert got.p_value == pytest.approx(ref.pvalue, rel=1e-7, abs=1e-12)
        se = math.sqrt(t.var(ddof=1) / n_t + c.var(ddof=1) / n_c)
        half = scipy.stats.t.ppf(0.975, got.df) * se
        assert got.ci.lo == pytest.approx(t.mean() - c.mean() - half, rel=1e-8)
        assert got.ci.hi == pytest.approx(t.mean() - c.mean() + half, rel=1e-8)


def test_t_distribution_matches_scipy() -> None:
    for df in (1.0, 2.7, 9.0, 61.5, 800.0, 2.5e5):
        for t in (0.0, 0.4, 1.7, 3.1, 8.0):
            assert t_two_sided_p(t, df) == pytest.approx(2 * scipy.stats.t.sf(t, df), rel=1e-8, abs=1e-14)
        for alpha in (0.01, 0.05, 0.2):
            assert t_critical(alpha, df) == pytest.approx(scipy.stats.t.ppf(1 - alpha / 2, df), rel=1e-9)
    dfs = np.array([5.0, 33.3, 410.0, 9.9e4])
    assert np.allclose(critical_values(dfs, 0.05), scipy.stats.t.ppf(0.975, dfs), atol=2e-5)


def test_always_valid_p_properties() -> None:
    diffs = np.linspace(0.0, 0.08, 81)
    p = np.minimum(1.0, np.exp(-mixture_log_e(diffs, 1e-4, DESIGN.rho)))
    assert np.all((p >= 0) & (p <= 1))
    assert np.all(np.diff(p) <= 0), "p must fall as |difference| grows at fixed variance"
    assert np.allclose(mixture_log_e(-diffs, 1e-4, DESIGN.rho), mixture_log_e(diffs, 1e-4, DESIGN.rho))
    # p < alpha exactly when the confidence sequence excludes 0
    radius = float(mixture_radius(1e-4, DESIGN.rho, 0.05))
    assert np.array_equal(p < 0.05, diffs > radius)
    # at a fixed difference, more information (less variance) gives a smaller p
    var = np.geomspace(1e-3, 1e-6, 40)
    p_var = np.exp(-mixture_log_e(0.03, var, DESIGN.rho))
    assert np.all(np.diff(np.minimum(1.0, p_var)) <= 0)


def test_compare_reports_both_tests_and_the_always_valid_interval_is_wider() -> None:
    rng = np.random.default_rng(3)
    control, treatment = ArmSummary.of(_scores(rng, 9500, 0.70)), ArmSummary.of(_scores(rng, 500, 0.75))
    r = compare(control, treatment, DESIGN)
    assert r.difference == pytest.approx(treatment.mean - control.mean)
    assert r.relative_difference == pytest.approx(r.difference / control.mean)
    assert r.burned_in and r.always_valid_p < 0.05 and r.welch.p_value < r.always_valid_p
    assert r.always_valid_ci.lo < r.welch.ci.lo < r.difference < r.welch.ci.hi < r.always_valid_ci.hi
    assert r.always_valid_ci.lo > 0
    payload = r.to_json()
    assert payload["control"] == {"n": 9500, "mean": round(control.mean, 6), "sd": round(control.sd, 6)}


def test_before_burn_in_nothing_is_claimed() -> None:
    rng = np.random.default_rng(4)
    r = compare(ArmSummary.of(_scores(rng, 400, 0.5)), ArmSummary.of(_scores(rng, 50, 0.9)), DESIGN)
    assert not r.burned_in and r.always_valid_p == 1.0
    assert math.isinf(r.always_valid_ci.lo) and math.isinf(r.always_valid_ci.hi)
    assert r.welch.p_value < 1e-6  # Welch still reports what it sees
    assert r.to_json()["always_valid_ci"] == {"lo": None, "hi": None}


def test_constant_arms_do_not_divide_by_zero() -> None:
    r = compare(ArmSummary.of([0.5] * 200), ArmSummary.of([0.6] * 200), DESIGN)
    assert r.always_valid_p == 0.0 and r.welch.p_value == 0.0
    same = compare(ArmSummary.of([0.5] * 200), ArmSummary.of([0.5] * 200), DESIGN)
    assert same.always_valid_p == 1.0 and same.welch.p_value == 1.0


def test_confidence_sequence_covers_under_continuous_monitoring() -> None:
    """200 simulated null weeks looked at every 5 minutes: the always-valid interval misses the
    true difference at *any* look in at most a few of them; a fixed-sample 95% interval read at
    every look misses in far more (so this test can fail)."""
    plan = SimulationPlan(queries_per_day=4000.0, days=3.0, burn_in=100)
    cum = simulate(plan, 0.0, 200, np.random.default_rng(11))
    misses = int((first_hits(plan, cum, 0.0)[Rule.CS_MISS] >= 0).sum())
    assert misses <= 14, f"always-valid interval missed the truth in {misses}/200 runs"
    n_t, n_c = cum.n_t, cum.n_c
    mean_t, mean_c = cum.s_t / np.maximum(n_t, 1), cum.s_c / np.maximum(n_c, 1)
    var = (cum.q_t / np.maximum(n_t, 1) - mean_t**2) / np.maximum(n_t - 1, 1) + (
        cum.q_c / np.maximum(n_c, 1) - mean_c**2
    ) / np.maximum(n_c - 1, 1)
    burned = np.minimum(n_t, n_c) >= plan.burn_in
    naive_miss = (burned & (np.abs(mean_t - mean_c) > 1.96 * np.sqrt(var))).any(axis=1).sum()
    assert naive_miss >= 3 * max(misses, 10), f"fixed-sample interval missed in only {naive_miss}/200"
