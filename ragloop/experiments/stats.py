"""Two arms' mean scores compared so that the answer stays valid however often it is looked at.

An experiment is aggregated every few minutes, and every aggregation is a look. A fixed-sample
test read at each look and stopped at the first p < 0.05 rejects a true null far more often than
5% (benchmarks/results/experiments_sim.md measures by how much). `compare` therefore reports two
things: Welch's t-test (what people expect to read, *for reporting only*) and an **always-valid**
test of the difference Δ = mean(treatment) − mean(control) that may be read at every look.

Derivation (mixture sequential probability ratio test, Robbins 1970; Johari, Koomen, Pekelis and
Walsh, "Peeking at A/B tests", KDD 2017; boundary as in Howard, Ramdas, McAuliffe and Sekhon,
"Time-uniform, nonparametric, nonasymptotic confidence sequences", AoS 2021):

1. Let θ̂ = x̄_T − x̄_C after n_T and n_C scores and V = σ_T²/n_T + σ_C²/n_C its variance. For
   s ≤ t, x̄_T(s) and x̄_T(t) share the first n_T(s) scores, so Cov(x̄_T(s), x̄_T(t)) = σ_T²/n_T(t):
   Cov(θ̂_s, θ̂_t) = V_t. Hence, with information I = 1/V, the process B(I) = I·(θ̂ − Δ) has
   Cov(B(I_s), B(I_t)) = I_s: a Brownian motion observed at the information times, whatever the
   allocation sequence (5% treatment, diurnal traffic) as long as it does not depend on outcomes.
2. For every λ, exp(λB − λ²I/2) is a mean-one martingale; mixing λ ~ N(0, 1/ρ) gives the
   mixture martingale M = sqrt(ρ / (I + ρ)) · exp(B² / (2 (I + ρ))). This is Johari's mSPRT
   likelihood ratio Λ with a N(0, τ²) prior on Δ, τ² = 1/ρ.
3. Ville's inequality: P(∃ t: M_t ≥ 1/α) ≤ α. So p_t = min(1, 1/M_t) (with B evaluated at Δ = 0)
   is an always-valid p-value — P(p_τ ≤ α) ≤ α at any stopping time τ — and inverting
   M_t(Δ) < 1/α gives the 1 − α confidence sequence
       θ̂ ± V · sqrt((I + ρ) · (log(1 + I/ρ) + 2 log(1/α))),
   which covers Δ at all looks simultaneously with probability ≥ 1 − α. p_t < α exactly when the
   interval at t excludes 0, so the two never disagree.
4. ρ is fixed before the first look (never tuned on data): `SequentialDesign.plan` puts the
   narrowest interval at a planned sample size, with confseq's closed form
   ρ = I_opt / (2 log(1/α) + log(1 + 2 log(1/α))).

Scores come from answers, but the unit an experiment randomises is the session (`assignment`), and
a session's turns are correlated; an arm built with `ArmSummary.clustered` carries the
cluster-robust variance of its mean, so V above, the information I = 1/V and Welch's degrees of
freedom are those of the sessions, the independent units the martingale argument needs.

Validity: exact for Gaussian scores with known variances. Scores here are bounded in [0, 1] and
the variances are plug-in sample variances, so it is asymptotic (the time-uniform CLT of
Waudby-Smith, Arnold, Wu, Wang and Ramdas, "Time-uniform central limit theory and asymptotic
confidence sequences", AoS 2024). Two guards follow from that: no always-valid p or interval is
issued before `burn_in` scores per arm (the plug-in variance of a handful of scores can be wildly
small), and decisions need far more (500 per arm by default); the simulation study checks the
error rate on skewed Beta scores rather than trusting the asymptotics. The p-value here is the
current-time 1/M_t, not its running minimum: both satisfy P(∃ t: p_t ≤ α) ≤ α (the same event),
and the current-time one needs no stored history and cannot be locked in by a spurious early
crossing; a caller that wants a monotone p may keep min(previous, current) after burn-in.

Implementations compared before writing this (see tests/experiments/test_reference.py):
`confseq` (the theory's authors) has this boundary, but its sdist pins pybind11 2.6 (no Python
3.11) and needs Boost headers — not installable from PyPI here; its values are pinned in a test.
`ville` (pure Python, 0.1.0) has the same normal mixture and Johari's mSPRT, checked live in a
test; its A/B class works on the unit-level arrival stream (IPW pseudo-outcomes), not on the
per-arm sums an aggregation has. `savvi` (Lindon et al.) does anytime-valid regression and
multinomial tests, one observation at a time in Python, and pulls cvxpy. `expectation` needs
Python ≥ 3.12.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragloop.experiments._tdist import t_critical, t_two_sided_p

_VARIANCE_FLOOR = 1e-12
"""V is floored here so that two constant arms give a finite (huge) statistic, not 0/0."""


@dataclass(frozen=True)
class ArmSummary:
    """What an aggregation knows about one arm: count, mean and sample variance (ddof = 1).

    `units` is the number of independent units behind the scores when they are not the scores
    themselves (sessions: an experiment assigns, and a time window collects, whole sessions). Then
    `variance` is the *effective* per-score variance, n × the cluster-robust variance of the mean
    (`clustered`), so every formula that reads variance / n gets the right standard error, and
    Welch's degrees of freedom count units, not scores."""

    n: int
    mean: float
    variance: float
    units: int | None = None

    def __post_init__(self) -> None:
        if self.n < 0 or not math.isfinite(self.mean) or not (self.variance >= 0 and math.isfinite(self.variance)):
            raise ValueError(f"invalid arm summary: n={self.n}, mean={self.mean}, variance={self.variance}")
        if self.units is not None and not 0 <= self.units <= self.n:
            raise ValueError(f"invalid arm summary: {self.units} units for {self.n} scores")

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)

    @property
    def independent(self) -> int:
        """How many independent observations the variance rests on."""
        return self.n if self.units is None else self.units

    @classmethod
    def clustered(cls, scores: Sequence[float] | np.ndarray, units: Sequence[str]) -> ArmSummary:
        """Scores that come in correlated groups (the turns of one session share its user, topic
        and answerability). The mean is the plain mean of the scores; its variance is the
        cluster-robust (CR1) one, G/(G−1) · Σ_g (Σ_{i∈g} (x_i − x̄))² / n², which reduces to s²/n
        when every group holds one score. Treating the scores as independent instead understates
        the variance by the design effect 1 + (m̄ − 1)·ICC, 1.8–2.2 on the MTRAG-UN conversations a
        simulation served: two windows of 40 sessions from one version then differ "significantly"
        in 15–19% of A/A trials, against 5.2–6.0% clustered (`benchmarks/clustered_intervals.py`)."""
        x = np.asarray(scores, dtype=np.float64)
        if x.ndim != 1 or not np.all(np.isfinite(x)):
            raise ValueError("scores must be a flat sequence of finite numbers")
        if len(units) != x.size:
            raise ValueError(f"{x.size} scores but {len(units)} unit labels")
        n = int(x.size)
        if n == 0:
            return cls(0, 0.0, 0.0, 0)
        labels, index = np.unique(np.asarray([str(u) for u in units]), return_inverse=True)
        g = int(labels.size)
        mean = float(x.mean())
        if g < 2:
            return cls(n, mean, 0.0, g)
        sums = np.bincount(index, weights=x - mean, minlength=g)
        var_mean = g / (g - 1) * float(np.sum(sums * sums)) / (n * n)
        return cls(n, mean, n * var_mean, g)

    @classmethod
    def of(cls, scores: Sequence[float] | np.ndarray) -> ArmSummary:
        x = np.asarray(scores, dtype=np.float64)
        if x.ndim != 1 or not np.all(np.isfinite(x)):
            raise ValueError("scores must be a flat sequence of finite numbers")
        n = int(x.size)
        if n == 0:
            return cls(0, 0.0, 0.0)
        return cls(n, float(x.mean()), float(x.var(ddof=1)) if n > 1 else 0.0)

    @classmethod
    def from_sums(cls, n: int, total: float, total_sq: float) -> ArmSummary:
        """From count, sum and sum of squares, as SQL `count/sum/sum(x*x)` returns them."""
        if n <= 0:
            return cls(0, 0.0, 0.0)
        mean = total / n
        variance = max(0.0, (total_sq - n * mean * mean) / (n - 1)) if n > 1 else 0.0
        return cls(n, mean, variance)


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    def contains(self, value: float) -> bool:
        return self.lo <= value <= self.hi

    def to_json(self) -> dict[str, float | None]:
        return {"lo": _finite(self.lo), "hi": _finite(self.hi)}


UNBOUNDED = Interval(-math.inf, math.inf)


@dataclass(frozen=True)
class SequentialDesign:
    """Fixed at experiment start: the interval level `alpha`, the mixing precision `rho`
    (information units, 1/score²), and `burn_in`, the scores per arm before any always-valid
    statement is made."""

    alpha: float = 0.05
    rho: float = 0.0
    burn_in: int = 100

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha}")
        if not self.rho > 0:
            raise ValueError("rho must be > 0: build the design with SequentialDesign.plan(...)")
        if self.burn_in < 2:
            raise ValueError(f"burn_in must be >= 2 scores per arm, got {self.burn_in}")

    @classmethod
    def plan(
        cls,
        *,
        n_treatment: int = 500,
        traffic_split: float = 0.05,
        sd: float = 0.2,
        alpha: float = 0.05,
        burn_in: int = 100,
    ) -> SequentialDesign:
        """Narrowest interval when the treatment arm has `n_treatment` scores of spread `sd`
        (and control its share at `traffic_split`). A wrong guess costs width, never validity."""
        check_split(traffic_split)
        if n_treatment < 1 or not sd > 0:
            raise ValueError(f"need n_treatment >= 1 and sd > 0, got {n_treatment}, {sd}")
        n_control = n_treatment * (1.0 - traffic_split) / traffic_split
        info = 1.0 / (sd * sd * (1.0 / n_treatment + 1.0 / n_control))
        return cls(alpha=alpha, rho=tuned_rho(info, alpha), burn_in=burn_in)


def check_split(traffic_split: float) -> float:
    """The treatment share must lie in (0, 0.5]: treatment is the minority arm by design."""
    if not (isinstance(traffic_split, int | float) and 0.0 < traffic_split <= 0.5):
        raise ValueError(f"traffic_split must lie in (0, 0.5], got {traffic_split!r}")
    return float(traffic_split)


def tuned_rho(info_opt: float, alpha: float) -> float:
    """confseq's `TwoSidedNormalMixture::best_rho`: ρ minimising the boundary near I = info_opt."""
    log_inv = 2.0 * math.log(1.0 / alpha)
    return info_opt / (log_inv + math.log1p(log_inv))


# -- the vectorised core: the simulation calls exactly these on (experiments x looks) arrays --


def mixture_log_e(diff: np.ndarray | float, var: np.ndarray | float, rho: float) -> np.ndarray:
    """log M for H0: Δ = 0 given θ̂ = `diff` and its variance `var` (step 2 above)."""
    v = np.maximum(np.asarray(var, dtype=np.float64), _VARIANCE_FLOOR)
    info = 1.0 / v
    b = np.asarray(diff, dtype=np.float64) * info
    return 0.5 * np.log(rho / (info + rho)) + b * b / (2.0 * (info + rho))


def mixture_radius(var: np.ndarray | float, rho: float, alpha: float) -> np.ndarray:
    """Half-width of the 1 − alpha confidence sequence at variance `var` (step 3 above)."""
    v = np.maximum(np.asarray(var, dtype=np.float64), _VARIANCE_FLOOR)
    info = 1.0 / v
    return v * np.sqrt((info + rho) * (np.log1p(info / rho) + 2.0 * math.log(1.0 / alpha)))


# -- the typed comparison --


@dataclass(frozen=True)
class WelchTest:
    """Welch's unequal-variance t-test: valid for *one* look fixed in advance; reported, never
    used to decide."""

    t: float
    df: float
    p_value: float
    ci: Interval


@dataclass(frozen=True)
class Comparison:
    """Treatment vs control on one metric at one look."""

    control: ArmSummary
    treatment: ArmSummary
    difference: float
    """mean(treatment) − mean(control)."""
    relative_difference: float
    """difference / mean(control) (±inf when the control mean is 0 and the difference is not)."""
    always_valid_ci: Interval
    """1 − alpha confidence sequence on the difference; UNBOUNDED before burn-in."""
    always_valid_p: float
    """1 before burn-in."""
    log_e_value: float
    welch: WelchTest
    alpha: float
    burned_in: bool

    def to_json(self) -> dict[str, object]:
        return {
            "control": _arm(self.control),
            "treatment": _arm(self.treatment),
            "difference": _round(self.difference),
            "relative_difference": _finite(self.relative_difference),
            "always_valid_ci": self.always_valid_ci.to_json(),
            "always_valid_p": _round(self.always_valid_p),
            "welch": {
                "t": _finite(self.welch.t),
                "df": _finite(self.welch.df),
                "p_value": _round(self.welch.p_value),
                "ci": self.welch.ci.to_json(),
            },
            "alpha": self.alpha,
            "burned_in": self.burned_in,
        }


def welch(control: ArmSummary, treatment: ArmSummary, alpha: float = 0.05) -> WelchTest:
    """Welch's t-test of treatment − control with the Welch–Satterthwaite degrees of freedom."""
    _need_two(control, treatment)
    diff = treatment.mean - control.mean
    vt, vc = treatment.variance / treatment.n, control.variance / control.n
    var = vt + vc
    if var == 0.0:  # both arms constant: the difference is exact
        t = math.copysign(math.inf, diff) if diff else 0.0
        return WelchTest(t, math.inf, 0.0 if diff else 1.0, Interval(diff, diff))
    df = var * var / (vt * vt / (treatment.independent - 1) + vc * vc / (control.independent - 1))
    se = math.sqrt(var)
    t = diff / se
    half = t_critical(alpha, df) * se
    return WelchTest(t, df, t_two_sided_p(t, df), Interval(diff - half, diff + half))


def compare(control: ArmSummary, treatment: ArmSummary, design: SequentialDesign) -> Comparison:
    """Both tests at this look. Needs ≥ 2 scores per arm (a variance); before `design.burn_in`
    per arm the always-valid part says nothing (p = 1, unbounded interval)."""
    _need_two(control, treatment)
    diff = treatment.mean - control.mean
    var = treatment.variance / treatment.n + control.variance / control.n
    burned_in = min(control.n, treatment.n) >= design.burn_in
    if burned_in:
        log_e = float(mixture_log_e(diff, var, design.rho))
        p = min(1.0, math.exp(-log_e)) if log_e > 0 else 1.0
        radius = float(mixture_radius(var, design.rho, design.alpha))
        ci = Interval(diff - radius, diff + radius)
    else:
        log_e, p, ci = 0.0, 1.0, UNBOUNDED
    relative = _relative(diff, control.mean)
    return Comparison(
        control=control,
        treatment=treatment,
        difference=diff,
        relative_difference=relative,
        always_valid_ci=ci,
        always_valid_p=p,
        log_e_value=log_e,
        welch=welch(control, treatment, design.alpha),
        alpha=design.alpha,
        burned_in=burned_in,
    )


def _relative(diff: float, base: float) -> float:
    if base != 0.0:
        return diff / base
    return math.copysign(math.inf, diff) if diff else 0.0


def _need_two(control: ArmSummary, treatment: ArmSummary) -> None:
    for name, arm in (("control", control), ("treatment", treatment)):
        if arm.n < 2:
            raise ValueError(f"the {name} arm has {arm.n} score(s); a comparison needs at least 2 per arm")
        if arm.independent < 2:
            raise ValueError(f"the {name} arm's scores come from {arm.independent} unit(s); a comparison needs 2")


def _arm(arm: ArmSummary) -> dict[str, object]:
    out: dict[str, object] = {"n": arm.n, "mean": _round(arm.mean), "sd": _round(arm.sd)}
    if arm.units is not None:
        out["sessions"] = arm.units
    return out


def _finite(x: float) -> float | None:
    return None if math.isnan(x) or math.isinf(x) else round(x, 6)


def _round(x: float) -> float:
    return round(x, 6)
