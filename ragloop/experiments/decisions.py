"""What a `Comparison` allows: promote the treatment, or halt the experiment on a guardrail.

**Promotion** (`promotable`) needs all of, on the primary metric:
- at least `min_samples` scores in *each* arm (500 by default: the seed's floor, and well past the
  sequential test's burn-in, so the asymptotics have something to stand on);
- always-valid p < `alpha` — equivalently the confidence sequence excludes 0 at this look, which
  holds however many looks came before;
- the point estimate of the difference ≥ `min_effect` (0.02 by default). Together with the
  previous rule the interval then lies entirely above 0 *and* the best estimate is practically
  worth a change. Requiring the interval's *lower* bound ≥ min_effect instead would ask for
  proof that the gain is at least 0.02: at 5% traffic it almost never fires for a true gain of
  0.02–0.05 within a week (the simulation reports that rule too, as `strict`). The point rule
  keeps the false-promotion guarantee (a promotion at Δ ≤ 0 needs the interval to miss Δ) and
  spends the rest on power.
Duration (≥ 24 h, for time-of-day variation), guardrails and the maintenance window are the
caller's: they depend on the clock and the experiment record, not on these numbers.

**Guardrails** (`check_guardrail`), at every aggregation, on each guardrail metric: breached
when the always-valid test is significant (p < `alpha`) on the *harmful* side and the point
estimate regresses by more than `max_regression` (2%) relative to the control mean. This mirrors
the promotion rule. The alternative — the whole interval beyond −2% — would wait until the
regression is proven larger than 2%: at 5% traffic that takes days for a 5% regression, while
harmed users keep arriving. Because the test is always-valid, looking after every aggregation
does not inflate false halts: with no true regression, P(ever halting) ≤ alpha/2 per metric (one
side of the two-sided interval); with k guardrails at most k·alpha/2 — a false halt costs a
restart, not a bad promotion. A halt is final: the caller records it and assignment sends
everyone to control (`ExperimentStatus.HALTED`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from ragloop.experiments.stats import Comparison


class Blocker(StrEnum):
    """Why a treatment is not (yet) promotable."""

    TOO_FEW_SAMPLES = "too_few_samples"
    NOT_SIGNIFICANT = "not_significant"
    EFFECT_BELOW_MINIMUM = "effect_below_minimum"


@dataclass(frozen=True)
class PromotionDecision:
    promote: bool
    blockers: tuple[Blocker, ...]
    reasons: tuple[str, ...]
    """One sentence per rule, passed or not: the evidence an audit entry records."""


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")


def promotable(
    result: Comparison,
    *,
    min_samples: int = 500,
    min_effect: float = 0.02,
    alpha: float = 0.05,
) -> PromotionDecision:
    """May the treatment replace control on the evidence of `result` (the primary metric)?"""
    _check_alpha(alpha)
    if min_samples < 2:
        raise ValueError(f"min_samples must be >= 2 per arm, got {min_samples}")
    if not (min_effect >= 0 and math.isfinite(min_effect)):
        raise ValueError(f"min_effect must be a finite number >= 0, got {min_effect}")
    blockers: list[Blocker] = []
    reasons: list[str] = []
    n_c, n_t = result.control.n, result.treatment.n
    enough = min(n_c, n_t) >= min_samples
    reasons.append(f"samples: control {n_c}, treatment {n_t} (need >= {min_samples} each)")
    if not enough:
        blockers.append(Blocker.TOO_FEW_SAMPLES)
    significant = result.always_valid_p < alpha
    ci = result.always_valid_ci
    reasons.append(
        f"always-valid p = {result.always_valid_p:.4g} (need < {alpha}); "
        f"{1 - result.alpha:.0%} confidence sequence [{ci.lo:.4g}, {ci.hi:.4g}]"
    )
    if not significant:
        blockers.append(Blocker.NOT_SIGNIFICANT)
    reasons.append(f"difference {result.difference:+.4g} (need >= {min_effect})")
    if not result.difference >= min_effect:
        blockers.append(Blocker.EFFECT_BELOW_MINIMUM)
    return PromotionDecision(promote=not blockers, blockers=tuple(blockers), reasons=tuple(reasons))


class Direction(StrEnum):
    HIGHER_IS_BETTER = "higher_is_better"
    LOWER_IS_BETTER = "lower_is_better"


@dataclass(frozen=True)
class GuardrailCheck:
    breached: bool
    regression: float
    """Relative change for the worse, treatment vs control (0.03 = 3% worse; negative = better)."""
    significant: bool
    reason: str


def check_guardrail(
    result: Comparison,
    *,
    max_regression: float = 0.02,
    alpha: float = 0.05,
    direction: Direction = Direction.HIGHER_IS_BETTER,
) -> GuardrailCheck:
    """Has the treatment regressed this guardrail metric by more than `max_regression`?"""
    _check_alpha(alpha)
    if not (max_regression >= 0 and math.isfinite(max_regression)):
        raise ValueError(f"max_regression must be a finite number >= 0, got {max_regression}")
    sign = 1.0 if direction is Direction.HIGHER_IS_BETTER else -1.0
    regression = -sign * result.relative_difference
    harmful = sign * result.difference < 0
    significant = result.burned_in and result.always_valid_p < alpha and harmful
    breached = significant and regression > max_regression
    if not result.burned_in:
        reason = "before burn-in: no always-valid statement yet"
    else:
        reason = (
            f"relative regression {regression:+.2%} (limit {max_regression:.0%}); "
            f"always-valid p = {result.always_valid_p:.4g} on the {'harmful' if harmful else 'favourable'} side"
        )
    return GuardrailCheck(breached=breached, regression=regression, significant=significant, reason=reason)
