"""Bootstrap intervals, paired tests and Cohen's kappa on cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from ragloop.evaluation.stats import (
    bootstrap_ci,
    bootstrap_percentile,
    cohen_kappa,
    cohen_kappa_point,
    paired_bootstrap,
    paired_test,
    ratio,
    sign_flip_gain_p,
    sign_flip_max_gain_p,
    sign_flip_max_gain_test,
)


def test_bootstrap_ci_contains_the_true_mean_and_is_deterministic_for_a_seed() -> None:
    rng = np.random.default_rng(7)
    covered = 0
    for i in range(100):
        data = rng.normal(0.3, 1.0, size=200)
        est = bootstrap_ci(list(data), resamples=500, seed=i)
        covered += est.lo <= 0.3 <= est.hi
        assert est.lo < est.value < est.hi
    assert covered >= 90  # nominal 95%
    data = list(rng.normal(0.3, 1.0, size=200))
    assert bootstrap_ci(data, seed=5) == bootstrap_ci(data, seed=5)
    assert bootstrap_ci(data, seed=5) != bootstrap_ci(data, seed=6)
    narrow = bootstrap_ci(list(rng.normal(0.3, 1.0, size=3200)), seed=5)
    wide = bootstrap_ci(data, seed=5)
    assert (narrow.hi - narrow.lo) < (wide.hi - wide.lo) / 2


def test_ratio_metrics_resample_items_not_predictions() -> None:
    num, den = [1, 0, 3, 2], [2, 0, 4, 2]  # item 2 carries no prediction
    assert ratio(num, den) == pytest.approx(6 / 8)
    est = bootstrap_ci(num, den, resamples=300)
    assert est.value == pytest.approx(0.75) and est.n == 3
    assert 0.0 <= est.lo <= 0.75 <= est.hi <= 1.0
    empty = bootstrap_ci([], [])
    assert empty.n == 0 and empty.value != empty.value


def test_paired_test_detects_a_real_difference_and_not_a_null_one() -> None:
    rng = np.random.default_rng(11)
    a = (rng.random(300) < 0.5).astype(float)
    b = a.copy()
    zeros = np.flatnonzero(a == 0)
    b[zeros[:40]] = 1.0  # config b fixes 40 items and breaks none
    real = paired_test(list(a), list(b))
    assert real.diff == pytest.approx(40 / 300)
    assert real.significant and real.p_value < 0.01 and real.lo > 0

    x = (rng.random(300) < 0.5).astype(float)
    y = (rng.random(300) < 0.5).astype(float)
    null = paired_test(list(x), list(y))
    assert not null.significant and null.lo < 0 < null.hi
    same = paired_test(list(x), list(x))
    assert same.diff == 0 and same.p_value == 1.0 and not same.significant


def test_cohen_kappa_on_a_hand_computed_table() -> None:
    # 20 both yes, 5 A-yes/B-no, 10 A-no/B-yes, 15 both no:
    # p_o = 35/50 = 0.7; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = (0.7-0.5)/(1-0.5) = 0.4
    a = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert cohen_kappa_point(a, b) == pytest.approx(0.4)
    est = cohen_kappa(a, b, resamples=500)
    assert est.value == pytest.approx(0.4) and est.lo < 0.4 < est.hi
    assert cohen_kappa_point([1, 0, 1], [1, 0, 1]) == 1.0
    assert cohen_kappa_point([1, 1, 0, 0], [0, 0, 1, 1]) == pytest.approx(-1.0)


def test_bootstrap_percentile() -> None:
    vals = [float(v) for v in range(1, 101)]
    est = bootstrap_percentile(vals, 50, resamples=300)
    assert est.value == pytest.approx(50.5)
    assert est.lo < 50.5 < est.hi


def test_every_variant_is_compared_paired_with_its_reference_config() -> None:
    from ragloop.evaluation.summary import comparison_pairs

    pairs = comparison_pairs(["baseline", "hybrid_rerank", "full", "no_refine", "full+qwen2.5-coder-1.5b"])
    assert ("full", "full+qwen2.5-coder-1.5b") in pairs and ("full", "no_refine") in pairs
    assert ("hybrid_rerank", "full") in pairs and ("baseline", "full") in pairs
    # the paired LLM report has no baseline: the chat-model variant is still tested against `full`
    assert comparison_pairs(["full", "full+qwen2.5-coder-1.5b"]) == [("full", "full+qwen2.5-coder-1.5b")]
    assert comparison_pairs(["hybrid", "hybrid_rerank"]) == []


def test_the_exact_gain_test_is_the_sign_test_where_the_percentile_interval_is_not_valid() -> None:
    """6 of 17 paired 0/1 items better, none worse: the 98.75% percentile interval lies above 0
    (what the chunking fit's Bonferroni level would have accepted), but the exact one-sided p is
    2^-6; with one item worse it is P(X >= 6 | 7 fair coins) = 8/128."""
    before, after = [0.0] * 17, [1.0] * 6 + [0.0] * 11
    assert paired_bootstrap(before, after, alpha=0.0125)[1] > 0
    assert sign_flip_gain_p(before, after) == pytest.approx(1 / 64)
    assert sign_flip_gain_p([0.0] * 6 + [1.0] + [0.0] * 10, [1.0] * 6 + [0.0] * 11) == pytest.approx(8 / 128)
    assert sign_flip_gain_p(after, before) == 1.0 and sign_flip_gain_p(before, before) == 1.0
    with pytest.raises(ValueError):
        sign_flip_gain_p([0.0, 1.0], [1.0])


def _fit(gains: dict[int, range], n: int = 31) -> tuple[list[float], list[list[float]]]:
    """A chunking fit's scores: item 9 found at the serving size and lost at every other, each
    size's `gains` found only there."""
    before = [1.0 if i == 9 else 0.0 for i in range(n)]
    return before, [[1.0 if i in g else 0.0 for i in range(n)] for g in gains.values()]


def test_the_best_of_several_sizes_pays_for_the_choice_by_the_max_statistic() -> None:
    """A real fit's shape (MTRAG-UN degraded, 31 pooled failures): 1310 finds 9 more and loses 1,
    p = 11/1024 alone, above the Bonferroni level for four sizes (0.00625) but, since the smaller
    sizes gain on a subset of the same questions, the family-wise p of the max statistic is the same
    11/1024. Sizes that gain on other questions each widen the null's maximum: never below the
    single test, never above Bonferroni."""
    nested = {320: range(1), 512: range(3), 819: range(6), 1310: range(9)}
    before, afters = _fit(nested)
    assert sign_flip_gain_p(before, afters[-1]) == pytest.approx(11 / 1024)
    assert sign_flip_max_gain_p(before, afters) == pytest.approx([1.0, 33 / 64, 85 / 1024, 11 / 1024])
    before, afters = _fit({512: range(10, 13), 819: range(13, 16), 1310: range(9)})
    single = [sign_flip_gain_p(before, a) for a in afters]
    family = sign_flip_max_gain_p(before, afters)
    assert all(s <= f <= 3 * s for s, f in zip(single, family, strict=True))
    assert family[0] > single[0] and family[1] > single[1]  # 3 found: 1310's flips can beat them
    assert sign_flip_max_gain_p(before, [afters[2]]) == [single[2]]
    with pytest.raises(ValueError):
        sign_flip_max_gain_p(before, [afters[0][:-1]])


def test_the_max_statistic_holds_the_family_wise_level() -> None:
    """Four alternatives, none better in truth: some alternative is called better (family-wise p <=
    0.05) about 5% of the time, exact (14 items) or Monte Carlo (30), where four separate tests at 5%
    would do so about 19% of the time."""
    rng = np.random.default_rng(5)
    family = single = 0
    for i in range(200):
        n = 14 if i % 2 else 30
        x, ys = rng.random(n), rng.random((4, n))
        family += min(sign_flip_max_gain_p(x, ys, resamples=2000, seed=i)) <= 0.05
        single += min(sign_flip_gain_p(x, y, resamples=2000, seed=i) for y in ys) <= 0.05
    assert 2 <= family <= 20 and single > family + 10  # 14 and 31 at this seed


def test_the_gain_test_holds_its_level_beyond_the_exact_range() -> None:
    """Past `exact_max` differing items it is Monte Carlo: under the null (scores exchangeable) it
    rejects at 5% about 5% of the time, and it agrees with the exact enumeration where both apply."""
    rng = np.random.default_rng(3)
    a, b = rng.random(12), rng.random(12)
    assert sign_flip_gain_p(a, b, exact_max=0, resamples=40_000) == pytest.approx(sign_flip_gain_p(a, b), abs=0.01)
    rejected = 0
    for i in range(200):
        x, y = rng.random(30), rng.random(30)
        rejected += sign_flip_gain_p(x, y, resamples=2000, seed=i) <= 0.05
    assert 2 <= rejected <= 20  # 10 expected; a test that always or never rejects fails here


def test_a_look_spends_the_attained_size_of_its_exact_test_not_its_level() -> None:
    """On 5 differing items no one-sided p is below 1/32: a look at level 0.025 could not reject and
    spends nothing. On 7 it rejects only when all 7 gain (1/128); at 0.07 also at 6 of 7 (8/128).
    Beyond the exact range the whole level is spent."""
    before = [0.0] * 20
    five = [[1.0] * 5 + [0.0] * 15]
    seven = [[1.0] * 7 + [0.0] * 13]
    assert sign_flip_max_gain_test(before, five, 0.025) == ([1 / 32], 0.0)
    assert sign_flip_max_gain_test(before, seven, 0.025) == ([1 / 128], 1 / 128)
    assert sign_flip_max_gain_test(before, seven, 0.07)[1] == pytest.approx(8 / 128)
    assert sign_flip_max_gain_test(before, seven, 0.0)[1] == 0.0
    nested, _ = _fit({320: range(1), 512: range(3), 819: range(6), 1310: range(9)})
    p, size = sign_flip_max_gain_test(nested, _fit({320: range(1), 819: range(6), 1310: range(9)})[1], 0.025)
    assert min(p) == pytest.approx(11 / 1024) and 11 / 1024 <= size <= 0.025
    wide = [[1.0] * 17 + [0.0] * 3]
    assert sign_flip_max_gain_test(before, wide, 0.01, resamples=500)[1] == 0.01
    assert sign_flip_max_gain_test(before, [[0.0] * 20], 0.025) == ([1.0], 0.0)


def test_the_attained_size_is_the_null_rate_of_rejection() -> None:
    """Checked against the null itself: flipping the signs of 9 differing items (real-valued, three
    alternatives) at random, the share of patterns where some p-value is <= 0.03 is the size."""
    rng = np.random.default_rng(2)
    d = rng.random((3, 9)) + 0.1
    before = [0.0] * 9
    _, size = sign_flip_max_gain_test(before, d.tolist(), 0.03)
    signs = ((np.arange(2**9)[:, None] >> np.arange(9)) & 1) * 2 - 1
    rejected = [min(sign_flip_max_gain_p(before, (d * s).tolist())) <= 0.03 for s in signs]
    assert size == pytest.approx(np.mean(rejected)) and 0 < size <= 0.03
