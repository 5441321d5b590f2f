"""The simulation study's machinery: plans are validated, streams are what they claim, rules fire."""

from __future__ import annotations

import numpy as np
import pytest

from ragloop.experiments.simulation import Rule, SimulationPlan, run_scenario, simulate, wilson


def test_streams_have_the_planned_traffic_split_and_means() -> None:
    plan = SimulationPlan(queries_per_day=20_000.0, days=2.0, diurnal_mean=0.0)
    cum = simulate(plan, 0.05, 20, np.random.default_rng(2))
    total = cum.n_t[:, -1] + cum.n_c[:, -1]
    assert cum.n_t.shape == (20, plan.looks) == (20, 576)
    assert np.all(np.diff(cum.n_t, axis=1) >= 0)
    assert abs(total.mean() / 40_000 - 1) < 0.01
    assert abs(cum.n_t[:, -1].sum() / total.sum() - 0.05) < 0.003
    mean_t, mean_c = cum.s_t[:, -1] / cum.n_t[:, -1], cum.s_c[:, -1] / cum.n_c[:, -1]
    assert abs(mean_c.mean() - 0.7) < 0.002 and abs((mean_t - mean_c).mean() - 0.05) < 0.005
    sd_c = np.sqrt(cum.q_c[:, -1] / cum.n_c[:, -1] - mean_c**2)
    assert np.allclose(sd_c, 0.2, atol=0.005)


def test_a_large_effect_is_promoted_after_the_minimum_duration() -> None:
    plan = SimulationPlan(queries_per_day=20_000.0, days=1.5)
    result = run_scenario(plan, 0.08, 20, seed=3, batch=16)
    ours = result.outcomes[Rule.ALWAYS_VALID]
    assert ours.fired == 20 and ours.median_hours is not None and 24.0 <= ours.median_hours < 25.0
    assert result.outcomes[Rule.GUARDRAIL_HALT].fired == 0
    assert result.outcomes[Rule.WELCH_EVERY_LOOK].median_hours < 24.0  # type: ignore[operator]
    assert set(result.outcomes) == set(Rule)


def test_wilson_interval() -> None:
    assert wilson(0, 100) == pytest.approx((0.0, 0.03699), abs=1e-5)
    lo, hi = wilson(50, 1000)
    assert lo < 0.05 < hi and hi - lo < 0.03
    with pytest.raises(ValueError, match="n > 0"):
        wilson(0, 0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"traffic_split": 0.7}, r"traffic_split must lie in \(0, 0.5\]"),
        ({"queries_per_day": 0.0}, "must be > 0"),
        ({"diurnal_traffic": 1.0}, "diurnal_traffic"),
        ({"control_mean": 0.97}, "control mean"),
    ],
)
def test_invalid_plans_are_refused(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SimulationPlan(**kwargs)  # type: ignore[arg-type]


def test_an_impossible_effect_is_refused() -> None:
    with pytest.raises(ValueError, match="outside what a Beta"):
        simulate(SimulationPlan(days=0.1), 0.3, 2, np.random.default_rng(0))


def test_resampled_streams_draw_from_the_real_pools() -> None:
    from ragloop.experiments.simulation import replay_plan, simulate_resampled

    rng = np.random.default_rng(5)
    control = np.concatenate([np.zeros(30), rng.uniform(0.4, 1.0, 170)])  # refusals score 0: a point mass
    treatment = np.clip(control + 0.1, 0.0, 1.0)
    plan = replay_plan(control, treatment, queries_per_day=20_000.0, days=2.0, traffic_split=0.5)
    assert plan.control_mean == pytest.approx(control.mean()) and plan.diurnal_mean == 0.0
    cum = simulate_resampled(plan, control, treatment, 10, rng)
    assert cum.n_t.shape == (10, plan.looks) and np.all(np.diff(cum.n_c, axis=1) >= 0)
    mean_t, mean_c = cum.s_t[:, -1] / cum.n_t[:, -1], cum.s_c[:, -1] / cum.n_c[:, -1]
    assert abs(mean_c.mean() - control.mean()) < 0.005
    assert abs((mean_t - mean_c).mean() - (treatment.mean() - control.mean())) < 0.005
    with pytest.raises(ValueError, match="at least 2 finite"):
        simulate_resampled(plan, np.array([0.5]), treatment, 1, rng)


def test_replay_of_one_pool_against_itself_rarely_promotes() -> None:
    from ragloop.experiments.simulation import replay_plan

    rng = np.random.default_rng(6)
    pool = np.concatenate([np.zeros(40), rng.beta(5, 2, 160)])
    plan = replay_plan(pool, pool, queries_per_day=2_000.0, days=3.0, traffic_split=0.5, min_samples=300)
    same = run_scenario(plan, 0.0, 60, seed=7, pools=(pool, pool))
    assert same.outcomes[Rule.ALWAYS_VALID].fired <= 3  # ≤ 5% expected; 60 experiments
    better = np.clip(pool + 0.08, 0.0, 1.0)
    shifted = run_scenario(plan, float(better.mean() - pool.mean()), 20, seed=8, pools=(pool, better))
    assert shifted.outcomes[Rule.ALWAYS_VALID].fired >= 18
