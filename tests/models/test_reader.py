"""The answer-sentence reader (`ReaderScorer`): features on handcrafted strips, one embedder call
per batch, output shapes, weights round trips, and the shipped model on a restatement followed
by its answer (real MiniLM)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from ragloop.config.settings import Settings
from ragloop.models.embedding import Embedder, HashedEmbedder
from ragloop.models.errors import UnknownModelError
from ragloop.models.scoring.base import Judgement, Scorer
from ragloop.models.scoring.calibration import LogisticModel, ScorerWeights, shipped_weights, shipped_weights_dir
from ragloop.models.scoring.reader import (
    FEATURES,
    SHIPPED,
    ReaderScorer,
    batch_features,
    chunk_strips,
    expected_kind,
)
from ragloop.text.sentences import split_strips

run = asyncio.run

QUESTION = "What is an example of an NP-intermediate problem?"
RESTATEMENT = "Such problems are called NP-intermediate problems."
ANSWER = (
    "The graph isomorphism problem, the discrete logarithm problem and the integer factorization problem "
    "are examples of problems believed to be NP-intermediate."
)
COMPLEXITY = (
    "It was shown by Ladner that if P is not equal to NP then there exist problems in NP that are neither "
    f"in P nor NP-complete. {RESTATEMENT} {ANSWER} They are some of the very few NP problems not known to "
    "be in P or to be NP-complete."
)
OTHER = (
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a region "
    "in France. They were descended from Norse raiders and pirates from Denmark, Iceland and Norway."
)


class CountingEmbedder(Embedder):
    """Wraps an embedder; records every call's texts."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.inner.embed(texts)


def _unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float64)
    return v / np.linalg.norm(v)


# --- features -----------------------------------------------------------------------------------------


def test_features_tell_a_restatement_from_the_answer_sentence_that_follows_it() -> None:
    """Hand-set vectors: the restatement is the closest strip to the question by cosine."""
    q = "In what year did the Normans conquer England?"
    intro = "The Normans were a people from northern France."
    restate = "The Normans conquered England."
    answer = "This happened in 1066 after the Battle of Hastings."
    vectors = {q: _unit(1, 0, 0), intro: _unit(0.2, 1, 0), restate: _unit(0.9, 0.1, 0), answer: _unit(0.5, 0, 1)}
    (rows,) = batch_features(q, [[intro, restate, answer]], vectors)
    f_restate, f_answer = rows[1], rows[2]
    assert set(rows[0]) == set(FEATURES)
    assert f_restate["best_cos"] == 1.0 and f_restate["cos"] > f_answer["cos"]
    assert f_restate["novelty"] == 0.0  # every content term of a restatement is in the question
    assert f_answer["novelty"] > 0.5
    assert f_answer["after_best_cos"] == 1.0 and f_restate["after_best_cos"] == 0.0
    assert f_answer["cos_prev"] == pytest.approx(f_restate["cos"])
    assert expected_kind(q) == "year"
    assert f_answer["kind_match"] == 1.0 and f_answer["kind_missing"] == 0.0  # 1066
    assert f_restate["kind_match"] == 0.0 and f_restate["kind_missing"] == 1.0
    assert f_answer["anaphor"] == 1.0 and f_answer["anaphor_cos_prev"] == pytest.approx(f_restate["cos"])
    assert f_answer["cov_win"] >= f_answer["cov"] and f_answer["cov_win"] == pytest.approx(f_restate["cov"])
    assert f_restate["position"] == 0.5 and rows[0]["first"] == 1.0


def test_idf_coverage_weights_rare_terms_over_common_ones() -> None:
    q = "Which enzyme does lysozyme resemble in bacteria?"
    strips = [
        "Bacteria are everywhere.",
        "Bacteria grow in soil.",
        "Bacteria make lysozyme-like enzymes.",
        "Lysozyme is found in tears.",
    ]
    vectors = {t: _unit(1, i) for i, t in enumerate([q, *strips])}
    (rows,) = batch_features(q, [strips], vectors)
    # "bacteria" is in three strips, "lysozyme" in two: the plain share counts them the same
    assert rows[0]["cov"] == rows[3]["cov"]
    assert rows[3]["idf_cov"] > rows[0]["idf_cov"]
    assert rows[2]["best_idf"] == 1.0 and rows[2]["idf_gap_batch"] == 0.0
    assert all(r["idf_gap_batch"] <= 0.0 for r in rows)


def test_batch_and_chunk_ranks_are_separate() -> None:
    q = "q?"
    a, b, c = "Alpha strip one.", "Beta strip two.", "Gamma strip three."
    vectors = {q: _unit(1, 0), a: _unit(1, 0.1), b: _unit(1, 1), c: _unit(1, 2)}
    rows = batch_features(q, [[b, c], [a]], vectors)
    assert [r["rank_chunk"] for r in rows[0]] == [1.0, 0.5]
    assert [r["rank_batch"] for r in rows[0]] == [0.5, pytest.approx(1 / 3)]
    assert rows[1][0]["rank_batch"] == 1.0 and rows[1][0]["chunk_cos"] == pytest.approx(float(vectors[a] @ vectors[q]))
    assert rows[0][0]["cos_gap_chunk"] == 0.0 and rows[0][0]["cos_gap_batch"] < 0.0


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("When did the Normans conquer England?", "year"),
        ("In what century did the Normans arrive?", "year"),
        ("How many people lived there?", "number"),
        ("What percentage of voters agreed?", "number"),
        ("Who was the leader of the Normans?", "name"),
        ("Where is Normandy?", "place"),
        ("In which country is Normandy?", "place"),
        ("What is an example of an NP-intermediate problem?", None),
    ],
)
def test_expected_kind(question: str, kind: str | None) -> None:
    assert expected_kind(question) == kind


# --- the scorer ---------------------------------------------------------------------------------------


def test_score_strips_matches_split_strips_of_each_chunk_in_one_embedder_call() -> None:
    chunks = [
        COMPLEXITY,
        "Intro line.\n\n```python\nprint('x')\n```\n\n- first item of a list\n- second item of a list\n",
        "",
        OTHER,
        OTHER,  # a duplicate chunk: its strips are embedded once
    ]
    emb = CountingEmbedder(HashedEmbedder())
    scorer = ReaderScorer(emb)
    out = run(scorer.score_strips(QUESTION, chunks))
    assert len(emb.calls) == 1
    assert len(emb.calls[0]) == len(set(emb.calls[0]))
    assert emb.calls[0][0] == QUESTION
    assert len(out) == len(chunks)
    for chunk, judged in zip(chunks, out, strict=True):
        assert [j.evidence for j in judged] == [s.text for s in split_strips(chunk)]
        assert all(isinstance(j, Judgement) and 0.0 <= j.p <= 1.0 for j in judged)
        assert all(set(j.features) == set(FEATURES) for j in judged)
    assert [j.p for j in out[3]] == [j.p for j in out[4]]
    assert len(emb.calls[0]) == 1 + len({s for c in chunks for s in chunk_strips(c)})


def test_relevance_is_the_best_strip_and_support_is_pairwise_in_one_call() -> None:
    emb = CountingEmbedder(HashedEmbedder())
    scorer = ReaderScorer(emb)
    assert isinstance(scorer, Scorer)
    per_strip = run(scorer.score_strips(QUESTION, [COMPLEXITY, OTHER, "  "]))
    rel = run(scorer.relevance(QUESTION, [COMPLEXITY, OTHER, "  "]))
    assert len(emb.calls) == 2
    for js, j in zip(per_strip[:2], rel[:2], strict=True):
        best = max(js, key=lambda x: x.p)
        assert j.p == best.p and j.evidence == best.evidence
    assert rel[2].p == 0.0 and rel[2].evidence == ""
    assert run(scorer.relevance(QUESTION, [])) == []
    sup = run(scorer.support([ANSWER, ANSWER], [COMPLEXITY, OTHER]))
    assert len(emb.calls) == 3
    assert sup[0].evidence == ANSWER and sup[0].p > sup[1].p
    with pytest.raises(ValueError, match="pairwise"):
        run(scorer.support([ANSWER], []))


def test_weights_round_trip_gives_identical_scores(ragloop_home: Path) -> None:
    rng = np.random.default_rng(0)
    model = LogisticModel(
        tuple(FEATURES),
        tuple(float(w) for w in rng.normal(size=len(FEATURES))),
        -1.5,
        tuple(float(m) for m in rng.normal(scale=0.1, size=len(FEATURES))),
        tuple(float(s) for s in rng.uniform(0.5, 2.0, size=len(FEATURES))),
    )
    shipped = shipped_weights(SHIPPED)
    assert shipped is not None and shipped.support is not None
    weights = ScorerWeights(
        scorer="reader:test", relevance=model, support=shipped.support, thresholds={"relevance": 0.5, "support": 0.5}
    )
    settings = Settings(home=ragloop_home, threads=1)
    path = weights.save(settings.home / "scorers" / "my-reader.json")
    emb = HashedEmbedder()
    direct = ReaderScorer(emb, weights)
    by_id = ReaderScorer.from_weights(weights.id, settings, embedder=emb)
    by_path = ReaderScorer.from_weights(path, settings, embedder=emb)
    by_stem = ReaderScorer.from_weights("my-reader", settings, embedder=emb)
    assert by_id.weights.id == by_path.weights.id == by_stem.weights.id == weights.id
    assert by_stem.name == "reader:my-reader"
    want = [j.p for js in run(direct.score_strips(QUESTION, [COMPLEXITY, OTHER])) for j in js]
    for scorer in (by_id, by_path, by_stem):
        got = [j.p for js in run(scorer.score_strips(QUESTION, [COMPLEXITY, OTHER])) for j in js]
        assert got == want
    # the id is a hash of the parameters: stable across a JSON round trip, different for other weights
    assert json.loads(path.read_text())["id"] == weights.id == ScorerWeights.load(path).id
    assert weights.id != shipped.id
    with pytest.raises(UnknownModelError):
        ReaderScorer.from_weights("no-such-reader", settings, embedder=emb)


def test_shipped_weights_are_fitted_without_the_contract_articles() -> None:
    path = shipped_weights_dir() / f"{SHIPPED}.json"
    data = json.loads(path.read_text())
    weights = ScorerWeights.load(path)
    assert data["id"] == weights.id
    assert weights.relevance is not None and weights.support is not None
    assert set(weights.relevance.feature_names) <= set(FEATURES)
    assert set(weights.thresholds) >= {"relevance", "support", "refine"}
    assert "SQuAD" in weights.training["dataset"]
    held_out = {"Normans", "Computational_complexity_theory", "Huguenot"}
    assert not held_out & set(weights.training["articles"])
    assert set(weights.training["held_out_articles"]) == held_out


@pytest.mark.slow
def test_answer_sentence_after_a_restatement_beats_it_with_real_minilm(ragloop_home: Path) -> None:
    scorer = ReaderScorer.from_weights(SHIPPED, Settings(home=ragloop_home, threads=1))
    assert scorer.name == "reader:default"
    (judged, other) = run(scorer.score_strips(QUESTION, [COMPLEXITY, OTHER]))
    p = {j.evidence: j for j in judged}
    assert p[RESTATEMENT].features["cos"] > p[ANSWER].features["cos"]  # cosine alone gets it wrong
    assert p[ANSWER].p > p[RESTATEMENT].p
    assert max(judged, key=lambda j: j.p).evidence == ANSWER
    assert max(j.p for j in judged) > max(j.p for j in other)
