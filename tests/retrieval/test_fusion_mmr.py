from __future__ import annotations

import numpy as np
import pytest

from ragloop.retrieval.fusion import normalize, rrf, weighted
from ragloop.retrieval.mmr import mmr

# -- RRF ---------------------------------------------------------------------------------------


def test_rrf_formula_by_hand() -> None:
    k = 10
    fused = dict(rrf({"bm25": [3, 1, 2], "dense": [1, 4]}, k=k))
    assert fused == pytest.approx(
        {
            1: 1 / (k + 2) + 1 / (k + 1),
            3: 1 / (k + 1),
            2: 1 / (k + 3),
            4: 1 / (k + 2),
        }
    )


def test_rrf_order_and_ties() -> None:
    result = rrf({"a": [5, 7], "b": [7, 5]})
    assert [d for d, _ in result] == [5, 7]  # equal fused scores: lower doc first
    assert result[0][1] == result[1][1]
    assert rrf({}) == []


def test_rrf_weights_and_bad_weights() -> None:
    rankings = {"bm25": [1, 2], "dense": [2, 1]}
    assert [d for d, _ in rrf(rankings, k=1, weights={"bm25": 3.0, "dense": 1.0})] == [1, 2]
    assert [d for d, _ in rrf(rankings, k=1, weights={"bm25": 1.0, "dense": 3.0})] == [2, 1]
    scaled = dict(rrf(rankings, k=5, weights={"bm25": 0.5, "dense": 0.0}))
    assert scaled[1] == pytest.approx(0.5 / 6) and scaled[2] == pytest.approx(0.5 / 7)
    with pytest.raises(ValueError, match="dense"):
        rrf(rankings, weights={"bm25": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        rrf(rankings, weights={"bm25": 1.0, "dense": -1.0})
    with pytest.raises(ValueError, match="k"):
        rrf(rankings, k=0)


def test_rrf_skips_padding_and_repeats() -> None:
    fused = dict(rrf({"dense": [4, -1, 4, 9]}, k=60))
    assert fused == pytest.approx({4: 1 / 61, 9: 1 / 62})


# -- normalisation -----------------------------------------------------------------------------


def test_minmax_and_zscore() -> None:
    s = np.array([2.0, 4.0, 10.0])
    np.testing.assert_allclose(normalize(s, "minmax"), (s - 2) / 8)
    z = normalize(s, "zscore")
    assert z.mean() == pytest.approx(0.0) and z.std() == pytest.approx(1.0)
    assert np.argsort(z).tolist() == [0, 1, 2]


@pytest.mark.parametrize("scores", [[3.5], [2.0, 2.0, 2.0]])
def test_normalising_a_list_without_spread(scores: list[float]) -> None:
    s = np.array(scores)
    np.testing.assert_array_equal(normalize(s, "minmax"), np.ones(len(s)))
    np.testing.assert_array_equal(normalize(s, "zscore"), np.zeros(len(s)))


def test_normalize_edge_cases() -> None:
    assert normalize(np.array([]), "minmax").size == 0
    assert normalize(np.array([]), "zscore").size == 0
    with pytest.raises(ValueError, match="NaN"):
        normalize(np.array([1.0, np.nan]), "minmax")
    with pytest.raises(ValueError, match="normalization"):
        normalize(np.array([1.0]), "rank")  # type: ignore[arg-type]


# -- weighted (convex) fusion ------------------------------------------------------------------


def _pair(ids: list[int], scores: list[float]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(ids, dtype=np.int64), np.array(scores, dtype=np.float32)


def test_weighted_minmax_with_missing_candidates() -> None:
    results = {"bm25": _pair([1, 2, 3], [9.0, 5.0, 1.0]), "dense": _pair([3, 4], [0.8, 0.4])}
    w = 0.25  # dense weight; BM25 gets 0.75
    fused = dict(weighted(results, {"bm25": 1 - w, "dense": w}))
    bm25 = {1: 1.0, 2: 0.5, 3: 0.0}  # (s - 1) / 8
    dense = {3: 1.0, 4: 0.0}
    expected = {d: (1 - w) * bm25.get(d, 0.0) + w * dense.get(d, 0.0) for d in (1, 2, 3, 4)}
    assert fused == pytest.approx(expected)


def test_weighted_order_weights_rescaled_and_padding_ignored() -> None:
    results = {"bm25": _pair([1, 2], [3.0, 1.0]), "dense": _pair([2, 1, -1], [0.9, 0.1, -np.inf])}
    by_bm25 = weighted(results, {"bm25": 3.0, "dense": 1.0})
    assert [d for d, _ in by_bm25] == [1, 2]
    assert by_bm25[0][1] == pytest.approx(0.75)  # weights 3:1 rescaled to 0.75 / 0.25
    assert [d for d, _ in weighted(results, {"bm25": 1.0, "dense": 3.0})] == [2, 1]
    equal = weighted(results, {"bm25": 1.0, "dense": 1.0})
    assert [d for d, _ in equal] == [1, 2] and equal[0][1] == equal[1][1]  # tie -> lower doc


def test_weighted_single_candidate_retriever_still_counts() -> None:
    """One BM25 hit normalises to 1 (not 0), so it beats dense-only candidates of equal rank."""
    results = {"bm25": _pair([7], [4.2]), "dense": _pair([3, 7], [0.9, 0.9])}
    fused = weighted(results, {"bm25": 0.5, "dense": 0.5})
    assert fused[0] == (7, pytest.approx(1.0)) and fused[1] == (3, pytest.approx(0.5))


def test_weighted_zscore_missing_gets_the_floor() -> None:
    results = {"bm25": _pair([1, 2, 3], [3.0, 2.0, 1.0]), "dense": _pair([4], [0.7])}
    fused = dict(weighted(results, {"bm25": 0.5, "dense": 0.5}, method="zscore"))
    z = normalize(np.array([3.0, 2.0, 1.0]), "zscore")
    # dense has one candidate (z = 0); the others get one unit below it
    assert fused[1] == pytest.approx(0.5 * z[0] - 0.5)
    assert fused[4] == pytest.approx(0.5 * z.min() + 0.0)
    assert fused[3] < fused[4]  # missing from dense costs more than sitting at bm25's floor


def test_weighted_duplicates_and_errors() -> None:
    fused = dict(weighted({"dense": _pair([5, 5, 6], [0.2, 0.9, 0.5])}, {"dense": 1.0}))
    assert fused == pytest.approx({5: 1.0, 6: 0.0})
    with pytest.raises(ValueError, match="no fusion weight"):
        weighted({"dense": _pair([1], [1.0])}, {"bm25": 1.0})
    with pytest.raises(ValueError, match="sum to zero"):
        weighted({"dense": _pair([1], [1.0])}, {"dense": 0.0})
    with pytest.raises(ValueError, match="ids but"):
        weighted({"dense": _pair([1, 2], [1.0])}, {"dense": 1.0})
    assert weighted({}, {}) == []


# -- MMR ---------------------------------------------------------------------------------------


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_mmr_lambda_one_is_relevance_order() -> None:
    rng = np.random.default_rng(0)
    vecs = _unit(rng.standard_normal((30, 16)))
    rel = np.round(rng.random(30), 1)  # rounding creates ties
    expected = sorted(range(30), key=lambda i: (-rel[i], i))[:10]
    assert mmr(vecs[0], vecs, rel, 10, 1.0) == expected


def test_mmr_demotes_a_duplicate() -> None:
    rng = np.random.default_rng(1)
    vecs = _unit(rng.standard_normal((6, 32)))
    vecs[1] = vecs[0]  # an exact duplicate of the best candidate
    rel = np.array([1.0, 0.95, 0.7, 0.6, 0.5, 0.4])
    assert mmr(vecs[0], vecs, rel, 3, 1.0)[:2] == [0, 1]
    diverse = mmr(vecs[0], vecs, rel, 3, 0.3)
    assert diverse[0] == 0 and 1 not in diverse[:2]


def test_mmr_scale_free_relevance_and_query_fallback() -> None:
    rng = np.random.default_rng(2)
    vecs = _unit(rng.standard_normal((12, 8)))
    rel = rng.random(12)
    # relevance is min-max scaled first, so an affine change of its scale changes nothing
    assert mmr(vecs[0], vecs, rel, 6, 0.5) == mmr(vecs[0], vecs, 100 * rel + 7, 6, 0.5)
    q = _unit(rng.standard_normal((1, 8)))[0]
    assert mmr(q, vecs, None, 12, 1.0) == np.argsort(-(vecs @ q), kind="stable").tolist()


def test_mmr_edges_and_errors() -> None:
    vecs = _unit(np.eye(3))
    assert mmr(vecs[0], vecs, np.ones(3), 10, 0.5) == [0, 1, 2]  # k > n, all equal -> index order
    assert mmr(vecs[0], vecs, np.ones(3), 0, 0.5) == []
    assert mmr(np.ones(3), np.zeros((0, 3)), np.zeros(0), 5, 0.5) == []
    with pytest.raises(ValueError, match="lambda"):
        mmr(vecs[0], vecs, np.ones(3), 2, 1.5)
    with pytest.raises(ValueError, match="relevance scores"):
        mmr(vecs[0], vecs, np.ones(2), 2, 0.5)
    with pytest.raises(ValueError, match="dimension"):
        mmr(np.ones(4), vecs, np.ones(3), 2, 0.5)
