"""Tier 1: the five cheap features, the linear model's rescaling of missing features, refitting,
weighted refitting."""

from __future__ import annotations

import random

import pytest

from ragloop.improve.tier1 import FEATURES, PRIOR, HeuristicModel, Tier1Input, cheap_features


def test_tier1_features() -> None:
    good = Tier1Input(
        question="When was the Zorblat Bridge completed?",
        answer="The Zorblat Bridge was completed in 1887 [1]. It spans the river Vell [1].",
        contexts=["The Zorblat Bridge was completed in 1887 by Marta Quill. It spans the river Vell."],
        retrieval_scores=[0.9, 0.5, 0.4, 0.3, 0.2, 0.1],
    )
    f = cheap_features(good)
    assert f.values["citation_coverage"] == 1.0
    assert f.values["retrieval_gap"] == pytest.approx(0.7)
    assert f.values["length_ok"] == 1.0 and f.n_claims == 2
    uncited = cheap_features(Tier1Input(good.question, "The bridge is old. It is a fine bridge [1].", good.contexts))
    assert uncited.values["citation_coverage"] == 0.5
    off_topic = cheap_features(Tier1Input(good.question, "Bananas are yellow fruit [1].", good.contexts))
    assert off_topic.values["bm25_overlap"] < f.values["bm25_overlap"]
    # the least-supported claim is the one that shares least with any passage
    mixed = cheap_features(
        Tier1Input(good.question, "The bridge was completed in 1887 [1]. Unicorns guard the gate [1].", good.contexts)
    )
    assert mixed.least_supported_claim == "Unicorns guard the gate."
    long = cheap_features(Tier1Input(good.question, "word " * 200, ["short context"]))
    assert long.length_ratio > 1.5 and long.values["length_ok"] == 0.0
    assert PRIOR.score(f.values) > PRIOR.score(uncited.values)


def test_heuristic_model_rescales_missing_features_and_refits() -> None:
    full = dict.fromkeys(FEATURES, 1.0)
    assert PRIOR.score(full) == pytest.approx(1.0)
    assert PRIOR.score({**full, "support": None}) == pytest.approx(1.0)  # same scale without the support check
    assert PRIOR.score(dict.fromkeys(FEATURES, 0.0)) == pytest.approx(PRIOR.bias)
    rng = random.Random(0)
    rows = [{f: rng.random() for f in FEATURES} for _ in range(200)]
    truth = {
        "citation_coverage": 0.5,
        "bm25_overlap": 0.1,
        "retrieval_gap": 0.0,
        "length_ok": 0.1,
        "support": 0.3,
        "refused": -0.2,
    }
    targets = [0.02 + sum(truth[f] * r[f] for f in FEATURES) for r in rows]
    fitted = HeuristicModel.fit(rows, targets, name="test")
    assert fitted.weights["citation_coverage"] == pytest.approx(0.5, abs=0.01)
    assert fitted.bias == pytest.approx(0.02, abs=0.01) and fitted.version.startswith("h-test-")
    assert HeuristicModel.from_json(fitted.to_json()) == fitted


def test_weights_count_in_the_fit_and_an_absent_feature_stays_out() -> None:
    """Two groups disagree on the same features; the heavier group wins. No row has `support`:
    its weight is 0, not a number fitted to imputed means."""
    rng = random.Random(1)
    rows: list[dict[str, float | None]] = []
    targets, weights = [], []
    for i in range(2000):
        r: dict[str, float | None] = {f: rng.random() for f in FEATURES}
        r["support"] = None
        heavy = i % 2 == 0
        rows.append(r)
        targets.append(0.9 * float(r["citation_coverage"] or 0.0) if heavy else 0.0)
        weights.append(3.0 if heavy else 1.0)
    fitted = HeuristicModel.fit(rows, targets, "w", weights)
    assert fitted.weights["support"] == 0.0
    assert fitted.weights["citation_coverage"] == pytest.approx(0.9 * 3 / 4, abs=0.05)
    unweighted = HeuristicModel.fit(rows, targets, "u")
    assert unweighted.weights["citation_coverage"] == pytest.approx(0.9 / 2, abs=0.05)
    with pytest.raises(ValueError, match="weights"):
        HeuristicModel.fit(rows, targets, "w", [0.0] * len(rows))


def test_refused_is_a_feature_the_prior_ignores() -> None:
    item = Tier1Input("q?", "I could not find that in the documents.", ["ctx"], refused=True)
    f = cheap_features(item)
    assert f.values["refused"] == 1.0
    assert PRIOR.score(f.values) == PRIOR.score({**f.values, "refused": 0.0})
