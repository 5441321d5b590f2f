"""Promotion and guardrail rules on hand-made comparisons: each rule can block on its own."""

from __future__ import annotations

import pytest

from ragloop.experiments import (
    ArmSummary,
    Blocker,
    Comparison,
    Direction,
    SequentialDesign,
    check_guardrail,
    compare,
    promotable,
)

DESIGN = SequentialDesign.plan(n_treatment=500, traffic_split=0.05, sd=0.2)


def _cmp(n_c: int, mean_c: float, n_t: int, mean_t: float, sd: float = 0.2) -> Comparison:
    return compare(ArmSummary(n_c, mean_c, sd * sd), ArmSummary(n_t, mean_t, sd * sd), DESIGN)


def test_a_clear_win_is_promotable_with_its_evidence() -> None:
    d = promotable(_cmp(20_000, 0.70, 1_000, 0.75))
    assert d.promote and d.blockers == ()
    assert len(d.reasons) == 3 and "always-valid p" in d.reasons[1]


@pytest.mark.parametrize(
    ("arms", "blocker"),
    [
        ((20_000, 0.70, 400, 0.78), Blocker.TOO_FEW_SAMPLES),
        ((9_500, 0.70, 500, 0.725), Blocker.NOT_SIGNIFICANT),
        ((2_000_000, 0.70, 100_000, 0.71), Blocker.EFFECT_BELOW_MINIMUM),
        ((20_000, 0.70, 1_000, 0.65), Blocker.EFFECT_BELOW_MINIMUM),
    ],
)
def test_each_rule_blocks_alone(arms: tuple[int, float, int, float], blocker: Blocker) -> None:
    d = promotable(_cmp(*arms))
    assert not d.promote and d.blockers == (blocker,)


def test_significant_but_small_effect_is_not_promoted() -> None:
    r = _cmp(2_000_000, 0.70, 100_000, 0.71)
    assert r.always_valid_p < 1e-6 and r.always_valid_ci.lo > 0
    assert promotable(r, min_effect=0.005).promote


def test_promotion_arguments_are_checked() -> None:
    r = _cmp(20_000, 0.70, 1_000, 0.75)
    with pytest.raises(ValueError, match="alpha"):
        promotable(r, alpha=0.0)
    with pytest.raises(ValueError, match="min_samples"):
        promotable(r, min_samples=1)
    with pytest.raises(ValueError, match="min_effect"):
        promotable(r, min_effect=-0.1)


def test_guardrail_breach_needs_significance_and_size() -> None:
    breach = check_guardrail(_cmp(20_000, 0.80, 1_000, 0.76))  # -5%, significant
    assert breach.breached and breach.significant and breach.regression == pytest.approx(0.05)
    small = check_guardrail(_cmp(2_000_000, 0.80, 100_000, 0.79))  # -1.25%, significant
    assert small.significant and not small.breached
    noisy = check_guardrail(_cmp(9_500, 0.80, 150, 0.77))  # -3.75%, not significant
    assert not noisy.significant and not noisy.breached
    better = check_guardrail(_cmp(20_000, 0.80, 1_000, 0.86))
    assert not better.breached and better.regression < 0


def test_guardrail_before_burn_in_never_halts() -> None:
    check = check_guardrail(_cmp(5_000, 0.9, 50, 0.3))
    assert not check.breached and "burn-in" in check.reason


def test_lower_is_better_guardrail() -> None:
    slower = _cmp(20_000, 0.40, 1_000, 0.44)  # e.g. a normalised latency: +10% is worse
    assert check_guardrail(slower, direction=Direction.LOWER_IS_BETTER).breached
    assert not check_guardrail(slower).breached
    with pytest.raises(ValueError, match="max_regression"):
        check_guardrail(slower, max_regression=float("nan"))
