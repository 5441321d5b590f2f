"""Answer metrics on hand-computed cases: SQuAD normalisation, EM/F1, the RAGAS formulas
through scripted scorers, citation precision/recall."""

from __future__ import annotations

import pytest

from ragloop.evaluation.metrics import answer as am
from ragloop.models.chat import run_sync
from ragloop.models.scoring import FunctionScorer


def test_squad_normalisation_em_and_f1() -> None:
    assert am.normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert am.exact_match("the Eiffel tower.", "Eiffel Tower") == 1.0
    # pred tokens [in, year, 1887] (article dropped), gold [1887]: P = 1/3, R = 1, F1 = 0.5
    assert am.token_f1("in the year 1887", "1887") == pytest.approx(0.5)
    assert am.token_f1("", "") == 1.0 and am.token_f1("x", "") == 0.0
    assert am.contains_gold("It was finished in 1887 [1].", ["1887", "in 1890"]) == 1.0
    assert am.contains_gold("It cost 18870 dollars.", ["1887"]) == 0.0  # whole tokens only


def test_squad_scores_read_a_refusal_as_no_answer() -> None:
    assert am.squad_scores("I couldn't find this.", True, [], True).exact == 1.0
    assert am.squad_scores("Rollo led them [1].", False, [], True).f1 == 0.0
    assert am.squad_scores("", True, ["Rollo"], False).f1 == 0.0
    s = am.squad_scores("Rollo [1].\n\nNote: Could not resolve: x", False, ["Rollo", "Duke Rollo"], False)
    assert (s.exact, s.f1, s.contains) == (1.0, 1.0, 1.0)


def _has_1887(claim: str, context: str) -> float:
    return 0.9 if "1887" in claim and "1887" in context else 0.1


def test_faithfulness_counts_supported_claims() -> None:
    judge = FunctionScorer(_has_1887)
    answer = "The bridge was completed in 1887 [1]. The bridge is painted a bright red colour [2]."
    assert am.claims(answer) == ["The bridge was completed in 1887.", "The bridge is painted a bright red colour."]
    f = run_sync(am.faithfulness(judge, answer, ["Completed in 1887.", "Spans the Vell."]))
    assert f == pytest.approx(0.5)
    # the context is passed as one concatenation, once per claim
    assert [c[2] for c in judge.calls] == ["Completed in 1887.\n\nSpans the Vell."] * 2
    assert run_sync(am.faithfulness(judge, "Ok.", ["x"])) is None


def test_context_precision_and_recall_formulas() -> None:
    # relevant at ranks 1 and 3: (P@1 * 1 + P@3 * 1) / 2 = (1 + 2/3) / 2
    assert am.context_precision_from([True, False, True]) == pytest.approx(5 / 6)
    assert am.context_precision_from([False, False]) == 0.0
    assert am.context_precision_from([]) is None
    judge = FunctionScorer(lambda q, p: 0.8 if "bridge" in p else 0.2)
    cp = run_sync(am.context_precision(judge, "q", ["a bridge", "ferry", "bridge again"]))
    assert cp == pytest.approx(5 / 6)
    # a short reference span is read with its question: one claim
    assert am.reference_claims("1887", "When was it completed?") == ["When was it completed? 1887"]
    rec = run_sync(am.context_recall(judge, "1887", ["It was completed in 1887."], "When was it completed?"))
    assert rec == 0.0  # the scripted judge supports a claim only from a context mentioning 'bridge'
    rec = run_sync(am.context_recall(judge, "the bridge", ["the bridge spans it"], "What spans the Vell?"))
    assert rec == 1.0


def test_citation_precision_and_recall() -> None:
    judge = FunctionScorer(lambda claim, ctx: 0.9 if claim.split()[1] in ctx else 0.1)
    answer = "The bridge opened in 1887 [1][2]. The tower stands tall in Ostria [3]. The ferry ended long ago."
    cited = {1: "the bridge text", 2: "unrelated", 3: "the tower text"}
    s = run_sync(am.citation_scores(judge, answer, cited))
    # pairs: (s1,1) ok, (s1,2) no, (s2,3) ok -> precision 2/3; sentences 3, supported 2 -> recall 2/3
    assert s.precision == pytest.approx(2 / 3) and s.recall == pytest.approx(2 / 3)
    assert (s.pairs, s.sentences) == (3, 3)
    missing = run_sync(am.citation_scores(judge, "The bridge opened in 1887 [9].", cited))
    assert missing.precision == 0.0 and missing.recall == 0.0


def test_answer_relevancy_offline_and_with_generated_questions() -> None:
    judge = FunctionScorer(lambda q, p: 0.75 if "bridge" in p else 0.25)
    ar = run_sync(am.answer_relevancy(judge, "q?", "The bridge opened in 1887. The ferry closed in 1890 too."))
    assert ar == pytest.approx(0.5)

    def embed(texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] if "bridge" in t else [0.0, 1.0] for t in texts]

    ar2 = run_sync(
        am.answer_relevancy(judge, "the bridge?", "x", generated_questions=["bridge when?", "ferry when?"], embed=embed)
    )
    assert ar2 == pytest.approx(0.5)


def test_judge_correct_and_context_sufficiency() -> None:
    judge = FunctionScorer(lambda a, b: 0.9 if "1887" in a and "1887" in b else 0.1)
    # the reference's one claim ("When? In 1887.") is supported by the answer: recall 1
    assert run_sync(am.judge_correct(judge, "It opened in 1887 [1].", "In 1887.", "When?")) == 1.0
    assert run_sync(am.judge_correct(judge, "x", "")) is None
    ref = "The bridge opened in 1887. It was built by Marta Quill, an engineer."
    c = run_sync(am.correctness(judge, "The bridge opened in 1887 [1]. Trams cross it every ten minutes [2].", ref))
    assert c is not None
    # reference claims: 2, supported by the answer: 1 -> recall 0.5; answer claims: 2, supported: 1 -> precision 0.5
    assert (c.recall, c.precision, c.f1) == (0.5, 0.5, 0.5)
    assert run_sync(am.context_sufficiency(judge, "1887?", ["nothing", "in 1887"])) == 1.0
    assert run_sync(am.context_sufficiency(judge, "1887?", [])) is None
