"""Scorers: calibration maths, lexical features, the embedding scorer (real MiniLM), the combined
scorer's fit/save/load, the registry and the test doubles. The LLM scorer is in test_scoring_llm.py."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from ragloop.config.settings import Settings
from ragloop.models.embedding import Embedder, HashedEmbedder
from ragloop.models.errors import UnknownModelError
from ragloop.models.scoring import (
    CombinedScorer,
    EmbeddingScorer,
    FixedScorer,
    FunctionScorer,
    Judgement,
    LexicalScorer,
    LLMScorer,
    LogisticModel,
    Scorer,
    ScorerWeights,
    WeightsError,
    best_threshold,
    find_weights,
    fit_combined,
    fit_logistic,
    fit_platt,
    make_scorer,
    platt,
    roc_auc,
    shipped_weights,
    shipped_weights_dir,
    user_weights_dir,
)
from ragloop.models.scoring.calibration import sigmoid
from ragloop.models.scoring.lexical import entities, numbers, relevance_features, support_features

run = asyncio.run

PASSAGE_NORMANDY = (
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
    "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland "
    "and Norway. Their leader Rollo agreed to swear fealty to King Charles III of West Francia."
)
PASSAGE_OTHER = (
    "The quarterback threw three touchdown passes in the final quarter. The stadium was sold out "
    "and the crowd cheered for the home team until the last whistle."
)


# --- calibration ------------------------------------------------------------------------------------


def test_logistic_fit_recovers_known_weights() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20000, 3))
    true_w, true_b = np.array([1.5, -2.0, 0.5]), -0.3
    y = (rng.random(20000) < sigmoid(X @ true_w + true_b)).astype(float)
    w, b = fit_logistic(X, y, l2=1e-3)
    assert np.allclose(w, true_w, atol=0.1) and abs(b - true_b) < 0.1
    # standardisation inside LogisticModel gives the same function
    model = LogisticModel.fit(X * 3 + 1, y, ["a", "b", "c"], l2=1e-3)
    assert np.allclose(model.predict_proba(X * 3 + 1), sigmoid(X @ w + b), atol=1e-3)


def test_logistic_fit_stays_finite_on_separable_data_with_l2() -> None:
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    y = np.array([0, 0, 1, 1])
    w, b = fit_logistic(X, y, l2=1.0)
    assert np.all(np.isfinite(w)) and math.isfinite(b) and w[0] > 0
    assert -b / w[0] == pytest.approx(1.5, abs=1e-6)  # boundary halfway between the classes


def test_platt_recovers_slope_and_intercept() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, size=30000)
    y = (rng.random(30000) < sigmoid(3 * x - 1)).astype(int)
    model = fit_platt(x, y, "s")
    assert model.weights[0] == pytest.approx(3.0, abs=0.15) and model.bias == pytest.approx(-1.0, abs=0.1)
    assert model.predict({"s": 1 / 3}) == pytest.approx(0.5, abs=0.02)


def test_roc_auc_on_hand_computed_cases() -> None:
    # positives 0.35, 0.8 vs negatives 0.1, 0.4: 3 of 4 pairs ordered right
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    # a tie between a positive and a negative counts one half: (0.5 + 1 + 1 + 1) / 4
    assert roc_auc([0.5, 0.5, 0.2, 0.9], [1, 0, 0, 1]) == pytest.approx(0.875)
    assert roc_auc([1, 2, 3], [0, 1, 1]) == 1.0 and roc_auc([3, 2, 1], [0, 1, 1]) == 0.0
    assert math.isnan(roc_auc([0.1, 0.2], [1, 1]))


def test_best_threshold_maximises_accuracy() -> None:
    t, acc = best_threshold([0.1, 0.2, 0.3, 0.8, 0.9], [0, 0, 1, 1, 1])
    assert t == pytest.approx(0.25) and acc == 1.0
    t, acc = best_threshold([0.9, 0.95, 0.97, 0.99], [0, 0, 1, 1])  # "never 0.5": all above it
    assert t == pytest.approx(0.96) and acc == 1.0


def test_weights_round_trip_keep_id_and_detect_edits(tmp_path: Path) -> None:
    w = ScorerWeights(
        scorer="x",
        relevance=platt("max_cos", 12.345678901234567, -6.1),
        support=LogisticModel(("a", "b"), (0.1, -0.2), 0.3, (1.0, 2.0), (0.5, 1.5)),
        thresholds={"relevance": 0.41},
        training={"note": "free text is not part of the id"},
    )
    path = w.save(tmp_path / "w.json")
    loaded = ScorerWeights.load(path)
    assert loaded == w and loaded.id == w.id and len(w.id) == 12
    relabelled = ScorerWeights("x", w.relevance, w.support, thresholds=w.thresholds, training={"note": "other words"})
    assert relabelled.id == w.id
    data = json.loads(path.read_text())
    data["relevance"]["weights"][0] = 99.0
    path.write_text(json.dumps(data))
    with pytest.raises(WeightsError, match="id mismatch"):
        ScorerWeights.load(path)


# --- lexical ------------------------------------------------------------------------------------------

CONTEXT_TREATY = (
    "The Peace of Westphalia was signed in 1648 in Osnabrück and Münster. It ended the Thirty Years' "
    "War, which had cost about 8,000,000 lives. Three delegations did not attend."
)


def test_number_agreement() -> None:
    ok, _ = support_features("The Peace of Westphalia was signed in 1648.", CONTEXT_TREATY)
    bad, evidence = support_features("The Peace of Westphalia was signed in 1658.", CONTEXT_TREATY)
    assert ok["num_agree"] == 1.0 and ok["num_missing"] == 0.0
    assert bad["num_agree"] == 0.0 and bad["num_missing"] == 1.0
    assert evidence.startswith("The Peace of Westphalia was signed in 1648")
    words, _ = support_features("3 delegations did not attend.", CONTEXT_TREATY)
    assert words["num_agree"] == 1.0  # "Three" in the context is the number 3
    assert numbers("about 8,000,000 lives and 3.50 percent") == {"8000000", "3.5"}


def test_entity_agreement() -> None:
    assert {"peace of westphalia", "osnabrück", "münster", "thirty years"} <= entities(CONTEXT_TREATY)
    ok, _ = support_features("The war ended with the Peace of Westphalia, signed in Münster.", CONTEXT_TREATY)
    bad, _ = support_features("The war ended with the Peace of Utrecht, signed in Münster.", CONTEXT_TREATY)
    assert ok["ent_agree"] == 1.0 and bad["ent_agree"] == 0.5
    assert "os.path.join" in entities("Call os.path.join(a, b) or json_loads() here.")
    assert "json_loads" in entities("Call os.path.join(a, b) or json_loads() here.")
    assert entities("However, it rained. What happened?") == set()


def test_negation_mismatch() -> None:
    same, _ = support_features("Three delegations did not attend.", CONTEXT_TREATY)
    flipped, _ = support_features("It did not end the Thirty Years' War.", CONTEXT_TREATY)
    assert same["neg_mismatch"] == 0.0 and flipped["neg_mismatch"] == 1.0


def test_lexical_scorer_separates_supported_from_perturbed_claims() -> None:
    scorer = LexicalScorer()
    claims = [
        "The Peace of Westphalia was signed in 1648 in Osnabrück and Münster.",
        "The Peace of Westphalia was signed in 1658 in Osnabrück and Münster.",
        "The Peace of Westphalia was signed in 1648 in Osnabrück and Vienna.",
        "The Peace of Westphalia was not signed in 1648 in Osnabrück and Münster.",
    ]
    js = run(scorer.support(claims, [CONTEXT_TREATY] * 4))
    assert all(0.0 <= j.p <= 1.0 for j in js)
    assert js[0].p > max(j.p for j in js[1:])
    assert set(js[0].features) == {
        "cov",
        "strip_cov",
        "bigram_cov",
        "num_agree",
        "num_missing",
        "ent_agree",
        "neg_mismatch",
    }
    rel = run(scorer.relevance("Which leader swore fealty to King Charles?", [PASSAGE_OTHER, PASSAGE_NORMANDY]))
    assert rel[1].p > rel[0].p and "Rollo" in rel[1].evidence
    feats, _ = relevance_features("How many lives did the war cost?", "The war was long. It was terrible.")
    assert feats["num_expected_missing"] == 1.0
    with pytest.raises(ValueError, match="pairwise"):
        run(scorer.support(["a"], []))


# --- embedding ------------------------------------------------------------------------------------------


class CountingEmbedder(Embedder):
    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def minilm_scorer() -> EmbeddingScorer:
    scorer = make_scorer("embedding:minilm", Settings(threads=1))
    assert isinstance(scorer, EmbeddingScorer)
    return scorer


def test_embedding_scorer_ranks_the_relevant_passage_first_with_real_minilm(
    minilm_scorer: EmbeddingScorer,
) -> None:
    js = run(minilm_scorer.relevance("Which country is Normandy in?", [PASSAGE_OTHER, PASSAGE_NORMANDY]))
    assert js[1].p > js[0].p + 0.3
    assert "Normandy, a region in France" in js[1].evidence
    assert set(js[1].features) == {"max_cos", "top2_mean", "passage_cos"}
    assert js[1].features["max_cos"] >= js[1].features["top2_mean"]
    assert minilm_scorer.weights is not None and minilm_scorer.weights.relevance is not None
    sup = run(
        minilm_scorer.support(
            ["Rollo swore fealty to King Charles III.", "Rollo swore fealty to King Charles III."],
            [PASSAGE_NORMANDY, PASSAGE_OTHER],
        )
    )
    assert sup[0].p > sup[1].p and "Rollo" in sup[0].evidence


def test_embedding_scorer_makes_one_embedder_call_per_batch() -> None:
    counting = CountingEmbedder(HashedEmbedder(64))
    scorer = EmbeddingScorer(counting)
    passages = [PASSAGE_NORMANDY, PASSAGE_OTHER, PASSAGE_NORMANDY, "Short one.", ""]
    js = run(scorer.relevance("Who led the Normans?", passages))
    assert len(js) == 5 and len(counting.calls) == 1
    sent = counting.calls[0]
    assert len(sent) == len(set(sent))  # duplicates (the repeated passage and its strips) embedded once
    assert js[0] == js[2] and js[4].p == scorer._rel.predict({"max_cos": 0.0}) and js[4].evidence == ""
    claims = [f"claim {i} about Normandy" for i in range(50)]
    out = run(scorer.support(claims, [PASSAGE_NORMANDY] * 50))
    assert len(out) == 50 and len(counting.calls) == 2
    assert run(scorer.relevance("q", [])) == [] and len(counting.calls) == 2
    lean = EmbeddingScorer(counting, whole_passage=False)
    js = run(lean.relevance("Who led the Normans?", [PASSAGE_NORMANDY]))
    assert "passage_cos" not in js[0].features and len(counting.calls) == 3
    assert PASSAGE_NORMANDY not in counting.calls[-1]  # only the query and the strips were embedded


# --- combined -------------------------------------------------------------------------------------------

REL_PAIRS = [
    ("Who led the Normans?", PASSAGE_NORMANDY, 1),
    ("Who led the Normans?", PASSAGE_OTHER, 0),
    ("Where is Normandy?", PASSAGE_NORMANDY, 1),
    ("Where is Normandy?", PASSAGE_OTHER, 0),
    ("How many touchdown passes did the quarterback throw?", PASSAGE_OTHER, 1),
    ("How many touchdown passes did the quarterback throw?", PASSAGE_NORMANDY, 0),
    ("Was the stadium sold out?", PASSAGE_OTHER, 1),
    ("Was the stadium sold out?", PASSAGE_NORMANDY, 0),
]
SUP_PAIRS = [
    ("The Normans gave their name to Normandy.", PASSAGE_NORMANDY, 1),
    ("The Normans gave their name to Brittany.", PASSAGE_NORMANDY, 0),
    ("The quarterback threw three touchdown passes.", PASSAGE_OTHER, 1),
    ("The quarterback threw five touchdown passes.", PASSAGE_OTHER, 0),
    ("The stadium was sold out.", PASSAGE_OTHER, 1),
    ("The stadium was not sold out.", PASSAGE_OTHER, 0),
]


def _fit_small() -> tuple[ScorerWeights, dict[str, Scorer]]:
    components: dict[str, Scorer] = {"emb": EmbeddingScorer(HashedEmbedder(64)), "lex": LexicalScorer()}
    weights = run(
        fit_combined(
            components,
            relevance=([(a, b) for a, b, _ in REL_PAIRS], [y for *_, y in REL_PAIRS]),
            support=([(a, b) for a, b, _ in SUP_PAIRS], [y for *_, y in SUP_PAIRS]),
            training={"what": "unit test pairs"},
        )
    )
    return weights, components


def test_combined_fit_save_load_round_trip(tmp_path: Path, ragloop_home: Path) -> None:
    weights, components = _fit_small()
    assert weights.components == {"emb": "embedding:test:hashed-64", "lex": "lexical"}
    assert weights.relevance is not None and "emb.max_cos" in weights.relevance.feature_names
    assert "lex.num_agree" in weights.support.feature_names  # type: ignore[union-attr]
    assert weights.training["relevance_fit"]["n"] == 8 and weights.training["what"] == "unit test pairs"
    scorer = CombinedScorer(weights, components)
    before = run(scorer.relevance("Who led the Normans?", [PASSAGE_NORMANDY, PASSAGE_OTHER]))
    sup_before = run(scorer.support([a for a, _, _ in SUP_PAIRS], [b for _, b, _ in SUP_PAIRS]))
    assert before[0].p > before[1].p
    assert sup_before[0].p > sup_before[1].p

    path = weights.save(tmp_path / "mine.json")
    again = ScorerWeights.load(path)
    assert again.id == weights.id == _fit_small()[0].id  # refitting the same data: the same id
    loaded = CombinedScorer(again, components)
    after = run(loaded.relevance("Who led the Normans?", [PASSAGE_NORMANDY, PASSAGE_OTHER]))
    sup_after = run(loaded.support([a for a, _, _ in SUP_PAIRS], [b for _, b, _ in SUP_PAIRS]))
    assert [j.p for j in after] == [j.p for j in before]
    assert [j.p for j in sup_after] == [j.p for j in sup_before]

    # found by id once saved under RAGLOOP_HOME/scorers, and by path
    settings = Settings.from_env()
    assert settings.home == ragloop_home
    weights.save(user_weights_dir(settings) / "anything.json")
    by_id = make_scorer(f"combined:{weights.id}", settings)
    by_path = make_scorer(f"combined:{path}", settings)
    assert isinstance(by_id, CombinedScorer) and by_id.weights.id == weights.id
    assert isinstance(by_path, CombinedScorer) and by_path.weights.id == weights.id
    assert find_weights("no-such-weights", [user_weights_dir(settings)]) is None


def test_combined_refuses_weights_whose_components_are_missing() -> None:
    weights, components = _fit_small()
    with pytest.raises(ValueError, match="components"):
        CombinedScorer(weights, {"lex": components["lex"]})


# --- shipped weights and registry --------------------------------------------------------------------------


def test_shipped_weights_load_and_name_their_training_data() -> None:
    names = ["combined-default", "embedding-minilm", "lexical-default", "llm-local-qwen2.5-coder-1.5b"]
    assert set(names) <= {p.stem for p in shipped_weights_dir().glob("*.json")}
    for name in names:
        w = shipped_weights(name)
        assert w is not None and w.relevance is not None and w.support is not None
        assert "SQuAD" in w.training["dataset"] and w.training["articles"]
        assert "relevance" in w.thresholds
        assert any(k.startswith("support") for k in w.thresholds)  # the llm fit keeps one per support label set


def test_make_scorer_names(minilm_scorer: EmbeddingScorer) -> None:
    settings = Settings(threads=1)
    lex = make_scorer("lexical", settings)
    assert isinstance(lex, LexicalScorer) and lex.name == "lexical"
    assert lex.weights.id == shipped_weights("lexical-default").id  # type: ignore[union-attr]
    hashed = make_scorer("embedding:test:hashed", settings)
    assert isinstance(hashed, EmbeddingScorer) and hashed.weights is None
    combined = make_scorer("combined:default", settings)
    assert isinstance(combined, CombinedScorer) and combined.name == "combined:default"
    assert combined.weights.id == shipped_weights("combined-default").id  # type: ignore[union-attr]
    js = run(combined.relevance("Which country is Normandy in?", [PASSAGE_OTHER, PASSAGE_NORMANDY]))
    assert js[1].p > js[0].p
    llm = make_scorer("llm:test:scripted", settings)
    assert isinstance(llm, LLMScorer) and llm.name == "llm:test:scripted"
    fixed = make_scorer("test:fixed-0.3", settings)
    assert [j.p for j in run(fixed.relevance("q", ["a", "b"]))] == [0.3, 0.3]
    with pytest.raises(UnknownModelError, match=r"unknown scorer 'nli:roberta'.*embedding:minilm"):
        make_scorer("nli:roberta", settings)
    with pytest.raises(UnknownModelError, match="p in"):
        make_scorer("test:fixed-1.5", settings)
    with pytest.raises(UnknownModelError, match="no combined scorer weights 'nope'"):
        make_scorer("combined:nope", settings)
    with pytest.raises(UnknownModelError, match="name the chat model"):
        make_scorer("llm:", settings)


def test_function_and_fixed_scorers() -> None:
    async def afn(q: str, p: str) -> Judgement:
        return Judgement(0.9 if "Normandy" in p else 0.1, "why", {"x": 1.0})

    fs = FunctionScorer(lambda q, p: float("Normandy" in p), support_fn=afn)
    rel = run(fs.relevance("q", [PASSAGE_NORMANDY, PASSAGE_OTHER]))
    sup = run(fs.support(["c1", "c2"], [PASSAGE_OTHER, PASSAGE_NORMANDY]))
    assert [j.p for j in rel] == [1.0, 0.0] and rel[0].evidence == PASSAGE_NORMANDY
    assert [j.p for j in sup] == [0.1, 0.9] and sup[1].features == {"x": 1.0}
    assert fs.batches == 2 and fs.calls[0] == ("relevance", "q", PASSAGE_NORMANDY) and fs.calls[-1][0] == "support"
    fixed = FixedScorer(0.25)
    assert fixed.name == "test:fixed-0.25"
    assert [j.p for j in run(fixed.support(["a"], ["b"]))] == [0.25] and fixed.calls == 1
    with pytest.raises(ValueError):
        FixedScorer(1.2)
