"""Uncertainty for every number the harness reports.

Every metric is a *ratio over items*: item i contributes a numerator `num_i` and a denominator
`den_i` and the metric is `sum(num) / sum(den)` over the items with `den_i > 0`. A plain mean
(accuracy, faithfulness) has `den_i = 1`; a pooled rate (chunk-level grader precision, where an
item contributes several predictions) has `den_i` = that item's count. Resampling *items* (not
predictions) keeps the predictions of one item together, which is what makes the intervals
honest when the predictions inside an item are correlated.

- `bootstrap_ci`: percentile bootstrap 95% interval (B resamples of the items, fixed seed).
- `paired_bootstrap` / `paired_permutation`: two configs on the *same* items. The bootstrap gives
  the interval of the difference; the permutation (sign-flip) test swaps each item's pair of
  results at random and gives a two-sided p-value. A difference is called significant only when
  p < alpha (and then the bootstrap interval excludes 0 in practice as well).
- `sign_flip_gain_p`: the one-sided p-value of a paired gain, exact over every sign assignment when
  few items differ. Decisions on a handful of items (a chunking fit on 8-35 pooled failures) need
  it: there the percentile bootstrap is anti-conservative (6 of 17 better and none worse puts its
  98.75% interval above 0, while the exact one-sided p is 1/64 = 0.016).
- `sign_flip_max_gain_p`: the same test for the best of several alternatives on the same items
  (a fit's chunk sizes), family-wise by the max statistic rather than Bonferroni;
  `sign_flip_max_gain_test` adds its attained size at a level, what a look at a growing pool
  spends of an error budget shared by every look.
- `cohen_kappa` with a bootstrap interval: agreement of two raters beyond chance.

All functions are deterministic for a given seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 20240601


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% interval; `n` = items that carried the metric."""

    value: float
    lo: float
    hi: float
    n: int

    def to_json(self) -> dict[str, float | int | None]:
        def r(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {"value": r(self.value), "lo": r(self.lo), "hi": r(self.hi), "n": self.n}


NAN_ESTIMATE = Estimate(math.nan, math.nan, math.nan, 0)


def _arrays(num: Sequence[float], den: Sequence[float] | None) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(num, dtype=np.float64)
    d = np.ones_like(a) if den is None else np.asarray(den, dtype=np.float64)
    if a.shape != d.shape:
        raise ValueError(f"numerators and denominators differ in length: {a.shape} vs {d.shape}")
    keep = d > 0
    return a[keep], d[keep]


def ratio(num: Sequence[float], den: Sequence[float] | None = None) -> float:
    a, d = _arrays(num, den)
    return float(a.sum() / d.sum()) if d.sum() > 0 else math.nan


def bootstrap_ci(
    num: Sequence[float],
    den: Sequence[float] | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = 0.05,
) -> Estimate:
    """Percentile bootstrap interval of sum(num)/sum(den) over items (den None: a mean)."""
    a, d = _arrays(num, den)
    n = len(a)
    if n == 0:
        return NAN_ESTIMATE
    point = float(a.sum() / d.sum())
    if n == 1:
        return Estimate(point, point, point, 1)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    dens = d[idx].sum(axis=1)
    stats = np.where(dens > 0, a[idx].sum(axis=1) / np.where(dens > 0, dens, 1.0), np.nan)
    stats = stats[~np.isnan(stats)]
    lo, hi = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return Estimate(point, float(lo), float(hi), n)


@dataclass(frozen=True)
class PairedTest:
    """b - a on the same items: the difference, its bootstrap interval and a permutation p."""

    diff: float
    lo: float
    hi: float
    p_value: float
    n: int
    alpha: float = 0.05

    @property
    def significant(self) -> bool:
        return self.n > 1 and self.p_value < self.alpha

    def to_json(self) -> dict[str, float | int | bool]:
        return {
            "diff": round(self.diff, 6),
            "lo": round(self.lo, 6),
            "hi": round(self.hi, 6),
            "p_value": round(self.p_value, 6),
            "n": self.n,
            "significant": self.significant,
        }


def _paired_arrays(
    a_num: Sequence[float],
    b_num: Sequence[float],
    a_den: Sequence[float] | None,
    b_den: Sequence[float] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    an = np.asarray(a_num, dtype=np.float64)
    bn = np.asarray(b_num, dtype=np.float64)
    ad = np.ones_like(an) if a_den is None else np.asarray(a_den, dtype=np.float64)
    bd = np.ones_like(bn) if b_den is None else np.asarray(b_den, dtype=np.float64)
    if not (an.shape == bn.shape == ad.shape == bd.shape):
        raise ValueError("paired tests need the same items in both configs")
    keep = (ad > 0) | (bd > 0)
    return an[keep], bn[keep], ad[keep], bd[keep]


def _safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def paired_bootstrap(
    a_num: Sequence[float],
    b_num: Sequence[float],
    a_den: Sequence[float] | None = None,
    b_den: Sequence[float] | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = 0.05,
) -> tuple[float, float, float]:
    """(diff, lo, hi) of metric(b) - metric(a), resampling the shared items."""
    an, bn, ad, bd = _paired_arrays(a_num, b_num, a_den, b_den)
    n = len(an)
    if n == 0 or ad.sum() == 0 or bd.sum() == 0:
        return math.nan, math.nan, math.nan
    diff = float(bn.sum() / bd.sum() - an.sum() / ad.sum())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    d = _safe_ratio(bn[idx].sum(1), bd[idx].sum(1)) - _safe_ratio(an[idx].sum(1), ad[idx].sum(1))
    d = d[~np.isnan(d)]
    lo, hi = np.quantile(d, [alpha / 2, 1 - alpha / 2])
    return diff, float(lo), float(hi)


def paired_permutation(
    a_num: Sequence[float],
    b_num: Sequence[float],
    a_den: Sequence[float] | None = None,
    b_den: Sequence[float] | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> float:
    """Two-sided p-value of the sign-flip test: under the null the two configs are
    exchangeable on every item, so each item's (a, b) pair is swapped with probability 1/2.
    p = (1 + #{|diff_perm| >= |diff_obs|}) / (1 + resamples)."""
    an, bn, ad, bd = _paired_arrays(a_num, b_num, a_den, b_den)
    n = len(an)
    if n == 0 or ad.sum() == 0 or bd.sum() == 0:
        return math.nan
    observed = abs(bn.sum() / bd.sum() - an.sum() / ad.sum())
    rng = np.random.default_rng(seed)
    swap = rng.random((resamples, n)) < 0.5
    pa_n = np.where(swap, bn, an).sum(1)
    pb_n = np.where(swap, an, bn).sum(1)
    pa_d = np.where(swap, bd, ad).sum(1)
    pb_d = np.where(swap, ad, bd).sum(1)
    perm = np.abs(_safe_ratio(pb_n, pb_d) - _safe_ratio(pa_n, pa_d))
    perm = np.nan_to_num(perm, nan=0.0)
    return float((1 + np.sum(perm >= observed - 1e-12)) / (1 + resamples))


ONE_SIDED = 0.025
"""The one-sided level a 95% interval's lower bound stands for: a gain shown by both."""
EXACT_MAX = 16
"""Items that differ up to which `sign_flip_gain_p` enumerates all 2^m sign assignments (65,536)."""


def sign_flip_gain_p(
    before: Sequence[float],
    after: Sequence[float],
    *,
    resamples: int = 20_000,
    seed: int = DEFAULT_SEED,
    exact_max: int = EXACT_MAX,
) -> float:
    """One-sided p-value that `after` beats `before` on the same items (mean gain > 0): under the
    null each item's difference is as likely negated, so p = P(sum of the sign-flipped differences
    >= the observed sum). Exact over the items that differ when there are at most `exact_max` of
    them (for 0/1 scores it is the exact sign test), else Monte Carlo, (1 + hits) / (1 + resamples).
    1.0 when nothing differs or the gain is not positive."""
    return sign_flip_max_gain_p(before, [after], resamples=resamples, seed=seed, exact_max=exact_max)[0]


def sign_flip_max_gain_p(
    before: Sequence[float],
    afters: Sequence[Sequence[float]],
    *,
    resamples: int = 20_000,
    seed: int = DEFAULT_SEED,
    exact_max: int = EXACT_MAX,
) -> list[float]:
    """Family-wise adjusted one-sided p-values that each of several alternatives beats `before` on
    the same items: the single-step max-T of Westfall and Young with sign flips. Under the null no
    alternative differs from `before` in distribution, so an item's differences to all of them are
    negated together, and p_j = P(max over alternatives of the flipped sums >= alternative j's
    observed sum). Rejecting where p_j <= alpha holds the family-wise error at alpha, as Bonferroni
    does; but alternatives that gain on the same items (chunk sizes 819 and 1310 finding the same
    passages) are not paid for as if independent: with one alternative it is `sign_flip_gain_p`.
    Exact when at most `exact_max` items differ anywhere, else Monte Carlo."""
    return sign_flip_max_gain_test(before, afters, 0.0, resamples=resamples, seed=seed, exact_max=exact_max)[0]


def sign_flip_max_gain_test(
    before: Sequence[float],
    afters: Sequence[Sequence[float]],
    level: float,
    *,
    resamples: int = 20_000,
    seed: int = DEFAULT_SEED,
    exact_max: int = EXACT_MAX,
) -> tuple[list[float], float]:
    """`sign_flip_max_gain_p`'s p-values, and the test's *attained size* at `level`: the null
    probability, given these items' differences, that some p-value is <= `level`. Exact tests on a
    few items are discrete (on 5 differing items no p-value is below 1/32), so a look at the data
    that could not have rejected spends none of an error budget shared by repeated looks, and one
    that could spends the largest attainable p-value <= `level`, not `level`. Monte Carlo p-values
    (more than `exact_max` items differ) are taken to spend all of `level`."""
    a = np.asarray(before, dtype=float)
    b = np.asarray(afters, dtype=float)
    if a.ndim != 1 or b.ndim != 2 or b.shape[1] != a.shape[0]:
        raise ValueError("before and every after must score the same items")
    d = b - a  # alternatives x items
    d = d[:, np.any(np.abs(d) > 1e-12, axis=0)]
    observed = d.sum(axis=1)
    m = d.shape[1]
    if m == 0:
        return [1.0] * len(b), 0.0
    tol = 1e-9 * max(1.0, float(np.abs(d).sum(axis=1).max()))
    if m <= exact_max:
        signs = ((np.arange(2**m)[:, None] >> np.arange(m)) & 1) * 2 - 1
        null_max = (signs @ d.T).max(axis=1)
        ordered = np.sort(null_max)
        values = np.unique(ordered[ordered > 0.0])
        tails = (len(ordered) - np.searchsorted(ordered, values - tol, side="left")) / len(ordered)
        size = float(tails[tails <= level].max()) if level > 0.0 and np.any(tails <= level) else 0.0
        return [1.0 if t <= 0.0 else float(np.mean(null_max >= t - tol)) for t in observed], size
    rng = np.random.default_rng(seed)
    flips = rng.choice(np.array([-1.0, 1.0]), size=(resamples, m))
    null_max = (flips @ d.T).max(axis=1)
    p = [1.0 if t <= 0.0 else float((1 + np.sum(null_max >= t - tol)) / (1 + resamples)) for t in observed]
    return p, max(0.0, level)


def paired_test(
    a_num: Sequence[float],
    b_num: Sequence[float],
    a_den: Sequence[float] | None = None,
    b_den: Sequence[float] | None = None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = 0.05,
) -> PairedTest:
    diff, lo, hi = paired_bootstrap(a_num, b_num, a_den, b_den, resamples=resamples, seed=seed, alpha=alpha)
    p = paired_permutation(a_num, b_num, a_den, b_den, resamples=resamples, seed=seed)
    n = len(_paired_arrays(a_num, b_num, a_den, b_den)[0])
    return PairedTest(diff, lo, hi, p, n, alpha)


# -- agreement ------------------------------------------------------------------------------------


def cohen_kappa_point(a: Sequence[object], b: Sequence[object]) -> float:
    """kappa = (p_o - p_e) / (1 - p_e): p_o observed agreement, p_e the agreement expected from
    the two raters' marginals. 1.0 when both raters use one identical label throughout."""
    if len(a) != len(b):
        raise ValueError("the two raters must label the same items")
    n = len(a)
    if n == 0:
        return math.nan
    labels = sorted({*map(str, a), *map(str, b)})
    sa = [str(x) for x in a]
    sb = [str(x) for x in b]
    p_o = sum(x == y for x, y in zip(sa, sb, strict=True)) / n
    p_e = sum((sa.count(lab) / n) * (sb.count(lab) / n) for lab in labels)
    if p_e >= 1.0:
        return 1.0 if p_o == 1.0 else 0.0
    return (p_o - p_e) / (1.0 - p_e)


def cohen_kappa(
    a: Sequence[object],
    b: Sequence[object],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = 0.05,
) -> Estimate:
    """Cohen's kappa with a percentile bootstrap interval over items."""
    n = len(a)
    point = cohen_kappa_point(a, b)
    if n < 2:
        return Estimate(point, point, point, n)
    rng = np.random.default_rng(seed)
    la, lb = list(a), list(b)
    values = []
    for _ in range(resamples):
        idx = rng.integers(0, n, size=n)
        values.append(cohen_kappa_point([la[i] for i in idx], [lb[i] for i in idx]))
    lo, hi = np.quantile(np.asarray(values), [alpha / 2, 1 - alpha / 2])
    return Estimate(point, float(lo), float(hi), n)


def percentile(values: Sequence[float], q: float) -> float:
    """numpy's linear-interpolation percentile; NaN for no values."""
    if len(values) == 0:
        return math.nan
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def bootstrap_percentile(
    values: Sequence[float],
    q: float,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = 0.05,
) -> Estimate:
    """The q-th percentile of the values with a percentile-bootstrap interval."""
    arr = np.asarray(values, dtype=np.float64)
    n = len(arr)
    if n == 0:
        return NAN_ESTIMATE
    point = float(np.percentile(arr, q))
    if n == 1:
        return Estimate(point, point, point, 1)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    stats = np.percentile(arr[idx], q, axis=1)
    lo, hi = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return Estimate(point, float(lo), float(hi), n)


def proportion_ci(k: int, n: int, z: float = 1.959963984540054) -> Estimate:
    """k/n with its Wilson score 95% interval (sound near 0 and 1, unlike Wald's); NaN for n = 0."""
    if n <= 0:
        return NAN_ESTIMATE
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half), n)
