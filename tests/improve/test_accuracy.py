"""Per-class precision/recall with intervals, the confusion matrix and the threshold search."""

from __future__ import annotations

import math

import pytest

from ragloop.improve.accuracy import class_scores, confusion, objective, search_thresholds
from ragloop.improve.types import FailureMode, Thresholds
from tests.improve.test_classifier import TOP, cand, make

R, G, S = FailureMode.RANKING_FAILURE, FailureMode.KNOWLEDGE_GAP, FailureMode.RETRIEVAL_SUCCESS


def test_class_scores_count_precision_over_predictions_and_recall_over_labels() -> None:
    labels = [R, R, R, G, S]
    preds = [R, R, G, G, R]
    by = {s.mode: s for s in class_scores(labels, preds)}
    assert (by[R].n, by[R].predicted) == (3, 3)
    assert by[R].precision.value == pytest.approx(2 / 3) and by[R].recall.value == pytest.approx(2 / 3)
    assert by[G].precision.value == pytest.approx(0.5) and by[G].recall.value == 1.0
    assert by[S].recall.value == 0.0 and math.isnan(by[S].precision.value)
    assert by[R].precision.lo <= by[R].precision.value <= by[R].precision.hi
    assert by[FailureMode.CHUNKING_FAILURE].n == 0
    worst, _macro = objective(list(by.values()))
    assert worst == 0.0  # success was never predicted right
    m = confusion(labels, preds)
    assert m[R.value] == {**dict.fromkeys([f.value for f in FailureMode], 0), R.value: 2, G.value: 1}
    with pytest.raises(ValueError):
        class_scores(labels, preds[:-1])


def test_the_search_finds_the_threshold_that_separates_gap_from_ranking() -> None:
    # ranking failures' oracle chunks score 0.55-0.7; knowledge gaps' best chunk 0.3-0.45
    inputs = [make(TOP, [cand("c40", s)]) for s in (0.55, 0.6, 0.65, 0.7)]
    inputs += [make(TOP, [cand("c40", s)]) for s in (0.3, 0.35, 0.4, 0.45)]
    labels = [R] * 4 + [G] * 4
    start = Thresholds(oracle=0.8)
    assert objective(class_scores(labels, [G] * len(labels)))[0] == 0.0
    best, trail = search_thresholds(inputs, labels, start=start)
    assert 0.45 < best.oracle <= 0.55
    assert trail and all("worst_min_pr" in t for t in trail)
    again, _ = search_thresholds(inputs, labels, start=start)
    assert again == best
