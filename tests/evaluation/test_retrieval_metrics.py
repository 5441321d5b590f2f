"""Ranking metrics against values computed by hand."""

from __future__ import annotations

import math

import pytest

from ragloop.evaluation.metrics import (
    average_precision,
    dedupe,
    hit_at_k,
    mean,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)

# relevant: a, c, f (f is never retrieved)
RANKED = ["a", "b", "c", "d", "e"]
REL = {"a", "c", "f"}


def test_recall_divides_by_all_relevant_and_is_not_capped_at_k() -> None:
    assert recall_at_k(RANKED, REL, 1) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, REL, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, REL, 3) == pytest.approx(2 / 3)
    assert recall_at_k(RANKED, REL) == pytest.approx(2 / 3)
    eight = {f"r{i}" for i in range(8)}
    assert recall_at_k(sorted(eight), eight, 5) == pytest.approx(5 / 8)


def test_precision_keeps_k_as_denominator_when_fewer_are_retrieved() -> None:
    assert precision_at_k(RANKED, REL, 1) == 1.0
    assert precision_at_k(RANKED, REL, 3) == pytest.approx(2 / 3)
    assert precision_at_k(RANKED, REL, 30) == pytest.approx(2 / 30)
    assert precision_at_k(["a", "c"], REL, 10) == pytest.approx(0.2)


def test_reciprocal_rank_and_cutoff() -> None:
    assert reciprocal_rank(RANKED, REL) == 1.0
    assert reciprocal_rank(["x", "y", "c"], REL) == pytest.approx(1 / 3)
    assert reciprocal_rank(["x", "y", "c"], REL, k=2) == 0.0
    assert reciprocal_rank([], REL) == 0.0
    assert mean([reciprocal_rank(["a"], REL), reciprocal_rank(["x", "a"], REL)]) == pytest.approx(0.75)


def test_hit_at_k() -> None:
    assert hit_at_k(["x", "c"], REL, 1) == 0.0
    assert hit_at_k(["x", "c"], REL, 2) == 1.0


def test_average_precision_divides_by_the_number_of_relevant_documents() -> None:
    # hits at ranks 1 and 3: (1/1 + 2/3) / 3 relevant, not / 2 retrieved-relevant
    assert average_precision(RANKED, REL) == pytest.approx((1 + 2 / 3) / 3)
    assert average_precision(RANKED, REL, k=2) == pytest.approx(1 / 3)
    assert average_precision(["a", "c", "f"], REL) == 1.0
    assert average_precision(["x"], REL) == 0.0
    # the classic textbook example: relevant at 1, 3, 6, 10 out of 5 relevant
    ranked = [str(i) for i in range(1, 11)]
    rel = {"1", "3", "6", "10", "missing"}
    assert average_precision(ranked, rel) == pytest.approx((1 + 2 / 3 + 3 / 6 + 4 / 10) / 5)


def test_ndcg_binary() -> None:
    # DCG@3 = 1/log2(2) + 1/log2(4) = 1.5; IDCG@3 (3 relevant) = 1 + 1/log2(3) + 1/2
    idcg = 1 + 1 / math.log2(3) + 0.5
    assert ndcg_at_k(RANKED, REL, 3) == pytest.approx(1.5 / idcg)
    # a single relevant document at rank 2: 1/log2(3)
    assert ndcg_at_k(["x", "a"], {"a"}, 10) == pytest.approx(1 / math.log2(3))
    assert ndcg_at_k(["a", "c", "f"], REL, 3) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "y"], REL, 2) == 0.0


def test_ndcg_graded_linear_and_exponential_gain() -> None:
    grades = {"a": 3, "b": 1, "c": 2, "z": 0}
    ranked = ["b", "a", "x", "c"]
    dcg = 1 / 1 + 3 / math.log2(3) + 0 + 2 / math.log2(5)
    idcg = 3 / 1 + 2 / math.log2(3) + 1 / 2
    assert ndcg_at_k(ranked, grades, 4) == pytest.approx(dcg / idcg)
    dcg_e = 1 / 1 + 7 / math.log2(3) + 0 + 3 / math.log2(5)
    idcg_e = 7 / 1 + 3 / math.log2(3) + 1 / 2
    assert ndcg_at_k(ranked, grades, 4, gain="exponential") == pytest.approx(dcg_e / idcg_e)
    # grade 0 is "judged not relevant": never counts, also not in the ideal ranking
    assert ndcg_at_k(["a", "c", "b"], grades, 3) == pytest.approx(1.0)


def test_repeated_ids_count_once_at_their_first_position() -> None:
    chunks = ["a", "a", "b", "a", "c"]  # three chunks of document a
    assert dedupe(chunks) == ["a", "b", "c"]
    assert recall_at_k(chunks, REL, 3) == pytest.approx(2 / 3)
    assert precision_at_k(chunks, REL, 2) == pytest.approx(0.5)
    assert average_precision(chunks, REL) == pytest.approx((1 + 2 / 3) / 3)
    assert reciprocal_rank(["x", "x", "a"], REL) == pytest.approx(0.5)


def test_mapping_judgements_count_positive_grades_only() -> None:
    rel = {"a": 1, "c": 0, "f": 2}
    assert recall_at_k(RANKED, rel) == pytest.approx(1 / 2)
    assert precision_at_k(RANKED, rel, 5) == pytest.approx(1 / 5)


@pytest.mark.parametrize(
    "metric",
    [
        lambda: recall_at_k(RANKED, set(), 5),
        lambda: average_precision(RANKED, {"a": 0}),
        lambda: ndcg_at_k(RANKED, [], 5),
        lambda: mean([]),
        lambda: precision_at_k(RANKED, REL, 0),
    ],
)
def test_undefined_cases_raise(metric: object) -> None:
    with pytest.raises(ValueError):
        metric()  # type: ignore[operator]
