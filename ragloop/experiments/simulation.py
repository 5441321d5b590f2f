"""Simulated experiments with known effects, looked at after every aggregation window.

Each simulated experiment is a week of traffic in 5-minute windows. A window's query count is
Poisson with a diurnal swing (`diurnal_traffic`), split between the arms at `traffic_split`
(independent Poisson counts); each query's score is Beta-distributed with sd `sd` around a mean
that also swings through the day for *both* arms (`diurnal_mean`: evening questions are harder),
the treatment's shifted by Δ. Beta scores are skewed and bounded, as tier-1/tier-2 scores are, so
the study tests the asymptotic always-valid test where it could fail rather than where it is exact.

At every window end the cumulative per-arm count, sum and sum of squares give exactly what the
service's aggregation gives, and the rules are evaluated on all (experiments x looks) at once
with the same vectorised functions `stats.compare` uses (`mixture_log_e`, `mixture_radius`):
- `always_valid`: the promotion rule (duration, samples per arm, always-valid p < alpha,
  difference >= min_effect);
- `always_valid_strict`: the same with the interval's lower bound >= min_effect;
- `always_valid_any_effect`: the same with any positive difference (no minimum effect), which
  shows what the sequential test alone controls;
- `welch_every_look_gated`: the promotion rule with Welch's p in place of the always-valid p;
- `welch_every_look_any_effect`: that, with any positive difference;
- `welch_every_look`: the plain repeated t-test: promote at the first look with p < alpha and a
  positive difference;
- `welch_fixed_horizon`: one Welch test at the planned end (the honest fixed-sample baseline);
- `guardrail_halt`: the guardrail rule applied to this stream (a regression of Δ < 0);
- `cs_miss`: the confidence sequence excluded the true Δ at some look after burn-in (its
  time-uniform miss rate, which must stay <= alpha).
The first look at which a rule fires is its decision time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from ragloop.experiments._tdist import critical_values
from ragloop.experiments.stats import SequentialDesign, check_split, mixture_log_e, mixture_radius


class Rule(StrEnum):
    ALWAYS_VALID = "always_valid"
    ALWAYS_VALID_STRICT = "always_valid_strict"
    ALWAYS_VALID_ANY_EFFECT = "always_valid_any_effect"
    WELCH_EVERY_LOOK_GATED = "welch_every_look_gated"
    WELCH_EVERY_LOOK_ANY_EFFECT = "welch_every_look_any_effect"
    WELCH_EVERY_LOOK = "welch_every_look"
    WELCH_FIXED_HORIZON = "welch_fixed_horizon"
    GUARDRAIL_HALT = "guardrail_halt"
    CS_MISS = "cs_miss"


@dataclass(frozen=True)
class SimulationPlan:
    queries_per_day: float = 2000.0
    days: float = 7.0
    window_minutes: float = 5.0
    traffic_split: float = 0.05
    control_mean: float = 0.7
    sd: float = 0.2
    diurnal_traffic: float = 0.5
    diurnal_mean: float = 0.05
    min_samples: int = 500
    min_duration_hours: float = 24.0
    min_effect: float = 0.02
    max_regression: float = 0.02
    alpha: float = 0.05
    burn_in: int = 100

    def __post_init__(self) -> None:
        check_split(self.traffic_split)
        if self.queries_per_day <= 0 or self.days <= 0 or self.window_minutes <= 0:
            raise ValueError("queries_per_day, days and window_minutes must be > 0")
        if not 0.0 <= self.diurnal_traffic < 1.0:
            raise ValueError(f"diurnal_traffic must lie in [0, 1), got {self.diurnal_traffic}")
        lo, hi = self.control_mean - self.diurnal_mean, self.control_mean + self.diurnal_mean
        if not (lo > 0.0 and hi < 1.0 and self.sd * self.sd < min(lo * (1 - lo), hi * (1 - hi))):
            raise ValueError("control mean ± diurnal_mean must stay in (0, 1) with sd² < m(1 - m)")

    @property
    def looks(self) -> int:
        return round(self.days * 24 * 60 / self.window_minutes)

    def design(self) -> SequentialDesign:
        """Mixture tuned at the treatment arm's minimum sample size: the first look that can decide."""
        return SequentialDesign.plan(
            n_treatment=self.min_samples,
            traffic_split=self.traffic_split,
            sd=self.sd,
            alpha=self.alpha,
            burn_in=self.burn_in,
        )


@dataclass(frozen=True)
class Cumulative:
    """Per-arm cumulative count, sum and sum of squares at each look, shape (experiments, looks)."""

    n_t: np.ndarray
    s_t: np.ndarray
    q_t: np.ndarray
    n_c: np.ndarray
    s_c: np.ndarray
    q_c: np.ndarray


def _beta_params(mean: np.ndarray, sd: float) -> tuple[np.ndarray, np.ndarray]:
    k = mean * (1.0 - mean) / (sd * sd) - 1.0
    return mean * k, (1.0 - mean) * k


def _arm_sums(
    rng: np.random.Generator, counts: np.ndarray, mean_w: np.ndarray, sd: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per-(experiment, window) sum and sum of squares of `counts` Beta scores."""
    a_w, b_w = _beta_params(np.clip(mean_w, 1e-6, 1 - 1e-6), sd)
    reps = counts.ravel()
    experiments = counts.shape[0]
    y = rng.beta(np.repeat(np.tile(a_w, experiments), reps), np.repeat(np.tile(b_w, experiments), reps))
    ends = np.cumsum(reps)
    starts = ends - reps
    cs = np.concatenate(([0.0], np.cumsum(y)))
    cq = np.concatenate(([0.0], np.cumsum(y * y)))
    return (cs[ends] - cs[starts]).reshape(counts.shape), (cq[ends] - cq[starts]).reshape(counts.shape)


def simulate(plan: SimulationPlan, delta: float, experiments: int, rng: np.random.Generator) -> Cumulative:
    """`experiments` independent weeks with true difference `delta` (treatment − control)."""
    looks = plan.looks
    hours = (np.arange(looks) + 0.5) * plan.window_minutes / 60.0
    phase = 2.0 * math.pi * hours / 24.0
    rate = plan.queries_per_day * plan.window_minutes / 1440.0 * (1.0 + plan.diurnal_traffic * np.sin(phase))
    mean_c = plan.control_mean + plan.diurnal_mean * np.sin(phase - 1.0)
    mean_t = mean_c + delta
    if np.any(mean_t <= 0) or np.any(mean_t >= 1) or plan.sd**2 >= float(np.min(mean_t * (1 - mean_t))):
        raise ValueError(f"delta {delta} puts the treatment mean outside what a Beta with sd {plan.sd} allows")
    split = plan.traffic_split
    n_t = rng.poisson(rate * split, size=(experiments, looks))
    n_c = rng.poisson(rate * (1.0 - split), size=(experiments, looks))
    s_t, q_t = _arm_sums(rng, n_t, mean_t, plan.sd)
    s_c, q_c = _arm_sums(rng, n_c, mean_c, plan.sd)
    acc = np.cumsum
    return Cumulative(
        acc(n_t, axis=1).astype(np.float64),
        acc(s_t, axis=1),
        acc(q_t, axis=1),
        acc(n_c, axis=1).astype(np.float64),
        acc(s_c, axis=1),
        acc(q_c, axis=1),
    )


def simulate_resampled(
    plan: SimulationPlan,
    control_scores: np.ndarray,
    treatment_scores: np.ndarray,
    experiments: int,
    rng: np.random.Generator,
) -> Cumulative:
    """Like `simulate`, but each query's score is drawn (with replacement) from a real score pool
    per arm, e.g. the tier-1 scores two pipeline variants earned on SQuAD 2.0 / MTRAG-UN questions:
    the test then meets the real distribution (point masses at 0 for refusals, skew, ties) instead
    of a Beta. The true difference is the difference of the pools' means."""
    pools = [np.asarray(p, dtype=np.float64) for p in (control_scores, treatment_scores)]
    if any(p.ndim != 1 or p.size < 2 or not np.all(np.isfinite(p)) for p in pools):
        raise ValueError("each score pool needs at least 2 finite scores")
    looks = plan.looks
    hours = (np.arange(looks) + 0.5) * plan.window_minutes / 60.0
    rate = (
        plan.queries_per_day
        * plan.window_minutes
        / 1440.0
        * (1.0 + plan.diurnal_traffic * np.sin(2 * math.pi * hours / 24))
    )
    out: list[np.ndarray] = []
    for share, pool in ((plan.traffic_split, pools[1]), (1.0 - plan.traffic_split, pools[0])):
        counts = rng.poisson(rate * share, size=(experiments, looks))
        reps = counts.ravel()
        y = pool[rng.integers(0, pool.size, size=int(reps.sum()))]
        ends = np.cumsum(reps)
        starts = ends - reps
        cs = np.concatenate(([0.0], np.cumsum(y)))
        cq = np.concatenate(([0.0], np.cumsum(y * y)))
        sums = (cs[ends] - cs[starts]).reshape(counts.shape)
        squares = (cq[ends] - cq[starts]).reshape(counts.shape)
        out += [np.cumsum(counts, axis=1).astype(np.float64), np.cumsum(sums, axis=1), np.cumsum(squares, axis=1)]
    return Cumulative(*out)


def _mean_var(n: np.ndarray, s: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    safe = np.maximum(n, 1.0)
    mean = s / safe
    var = np.maximum(q - n * mean * mean, 0.0) / np.maximum(n - 1.0, 1.0)
    return mean, var


def first_hits(plan: SimulationPlan, cum: Cumulative, delta: float) -> dict[Rule, np.ndarray]:
    """For each rule, the first look (0-based) at which it fires per experiment, -1 if never."""
    design = plan.design()
    alpha = plan.alpha
    mean_t, var_t = _mean_var(cum.n_t, cum.s_t, cum.q_t)
    mean_c, var_c = _mean_var(cum.n_c, cum.s_c, cum.q_c)
    both = np.minimum(cum.n_t, cum.n_c)
    valid = both >= 2
    n_t, n_c = np.maximum(cum.n_t, 1.0), np.maximum(cum.n_c, 1.0)
    vt, vc = var_t / n_t, var_c / n_c
    var = vt + vc
    diff = mean_t - mean_c
    burned = both >= design.burn_in
    av_significant = burned & (mixture_log_e(diff, var, design.rho) > math.log(1.0 / alpha))
    radius = mixture_radius(var, design.rho, alpha)

    hours = (np.arange(plan.looks) + 1) * plan.window_minutes / 60.0
    gate = (hours >= plan.min_duration_hours)[None, :] & (both >= plan.min_samples)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(var)
        t = np.where(se > 0, diff / se, 0.0)
        df = np.where(valid, var * var / (vt * vt / np.maximum(n_t - 1, 1) + vc * vc / np.maximum(n_c - 1, 1)), 1.0)
    welch_significant = valid & (np.abs(t) > critical_values(np.nan_to_num(df, nan=1.0, posinf=1e7), alpha))
    big_enough = diff >= plan.min_effect
    last = np.zeros_like(gate)
    last[:, -1] = True
    relative_drop = np.where(mean_c > 0, -diff / np.maximum(mean_c, 1e-12), 0.0)
    masks = {
        Rule.ALWAYS_VALID: gate & av_significant & big_enough,
        Rule.ALWAYS_VALID_STRICT: gate & burned & (diff - radius >= plan.min_effect),
        Rule.ALWAYS_VALID_ANY_EFFECT: gate & av_significant & (diff > 0),
        Rule.WELCH_EVERY_LOOK_GATED: gate & welch_significant & big_enough,
        Rule.WELCH_EVERY_LOOK_ANY_EFFECT: gate & welch_significant & (diff > 0),
        Rule.WELCH_EVERY_LOOK: welch_significant & (diff > 0),
        Rule.WELCH_FIXED_HORIZON: last & gate & welch_significant & big_enough,
        Rule.GUARDRAIL_HALT: av_significant & (diff < 0) & (relative_drop > plan.max_regression),
        Rule.CS_MISS: burned & (np.abs(diff - delta) > radius),
    }
    out = {}
    for rule, mask in masks.items():
        out[rule] = np.where(mask.any(axis=1), np.argmax(mask, axis=1), -1)
    return out


def replay_plan(control_scores: np.ndarray, treatment_scores: np.ndarray, **kw: float) -> SimulationPlan:
    """A plan whose control mean and sd (the mixture's tuning) are the real pools' (pooled sd)."""
    c = np.asarray(control_scores, dtype=np.float64)
    t = np.asarray(treatment_scores, dtype=np.float64)
    sd = float(np.sqrt((c.var(ddof=1) * (c.size - 1) + t.var(ddof=1) * (t.size - 1)) / (c.size + t.size - 2)))
    return SimulationPlan(control_mean=float(c.mean()), sd=sd, diurnal_mean=0.0, **kw)  # type: ignore[arg-type]


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial proportion k/n (sound near 0, unlike Wald's)."""
    if n <= 0:
        raise ValueError("wilson interval needs n > 0")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class RuleOutcome:
    rule: Rule
    fired: int
    experiments: int
    rate: float
    rate_lo: float
    rate_hi: float
    median_hours: float | None
    """Median decision time among the experiments where the rule fired."""

    def to_json(self) -> dict[str, object]:
        r = 6
        median = None if self.median_hours is None else round(self.median_hours, 2)
        return {
            "rule": self.rule.value,
            "fired": self.fired,
            "experiments": self.experiments,
            "rate": round(self.rate, r),
            "rate_ci95": [round(self.rate_lo, r), round(self.rate_hi, r)],
            "median_hours": median,
        }


@dataclass(frozen=True)
class ScenarioResult:
    plan: SimulationPlan
    delta: float
    experiments: int
    outcomes: dict[Rule, RuleOutcome] = field(default_factory=dict)


def run_scenario(
    plan: SimulationPlan,
    delta: float,
    experiments: int,
    *,
    seed: int = 0,
    batch: int = 100,
    pools: tuple[np.ndarray, np.ndarray] | None = None,
) -> ScenarioResult:
    """Simulate `experiments` in batches (memory stays ~ batch x looks) and summarise each rule.
    `pools` (control, treatment): resample real scores instead of Beta draws (`delta` must then be
    the difference of their means; `replay_plan` builds the matching plan)."""
    if experiments < 1 or batch < 1:
        raise ValueError("experiments and batch must be >= 1")
    rng = np.random.default_rng(seed)
    hits: dict[Rule, list[np.ndarray]] = {rule: [] for rule in Rule}
    done = 0
    while done < experiments:
        size = min(batch, experiments - done)
        cum = (
            simulate(plan, delta, size, rng)
            if pools is None
            else simulate_resampled(plan, pools[0], pools[1], size, rng)
        )
        for rule, first in first_hits(plan, cum, delta).items():
            hits[rule].append(first)
        done += size
    outcomes = {}
    for rule, parts in hits.items():
        first = np.concatenate(parts)
        fired = first[first >= 0]
        lo, hi = wilson(int(fired.size), experiments)
        median = float(np.median((fired + 1) * plan.window_minutes / 60.0)) if fired.size else None
        outcomes[rule] = RuleOutcome(rule, int(fired.size), experiments, fired.size / experiments, lo, hi, median)
    return ScenarioResult(plan, delta, experiments, outcomes)
