"""Decision metrics and failure diagnosis on hand-built result records."""

from __future__ import annotations

from typing import Any

import pytest

from ragloop.evaluation.metrics.agent import agent_metrics, retrieval_metrics
from ragloop.evaluation.metrics.item import item_metrics, outcome_metrics
from ragloop.evaluation.report import diagnose, is_failure, refusal_curve

BUDGETS = {"tau_lower": 0.3, "tau_upper": 0.7, "max_rewrites": 2, "rewrite": True, "k": 3}


def rec(trace: list[dict[str, Any]], grades: dict[str, float | None], **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "x",
        "mode": "agent",
        "kind": "answerable",
        "should_refuse": False,
        "gold_docs": ["P2"],
        "gold_chunks": [],
        "refused": False,
        "termination_reason": "converged",
        "budgets": BUDGETS,
        "trace": trace,
        "chunks": {c: {"passage": "P" + c[1:], "grade": g} for c, g in grades.items()},
        "answer": "The answer [1].",
        "latency_ms": 12.0,
    }
    return base | kw


def step(node: str, decision: str = "", **detail: Any) -> dict[str, Any]:
    return {"node": node, "decision": decision, "detail": detail, "latency_ms": 1.0}


def test_grader_and_retrieval_metrics_on_one_turn() -> None:
    r = rec(
        [
            step("retrieve", chunk_ids=["c1", "c2", "c3"]),
            step("grade", "AMBIGUOUS", scores={"c1": 0.2, "c2": 0.5, "c3": 0.4}, kept=["c2", "c3"]),
            step("refine"),
            step("generate"),
            step("critique"),
            step("finalize"),
        ],
        {"c1": 0.2, "c2": 0.5, "c3": 0.4},
    )
    m = agent_metrics(r)
    assert m["grader_set_precision"] == (1, 1) and m["grader_set_recall"] == (1, 1)
    assert m["grader_chunk_precision"] == (1, 2) and m["grader_chunk_recall"] == (1, 1)
    assert m["verdict_ambiguous"] == (1.0, 1.0) and m["verdict_accuracy"] == (0.0, 1.0)
    assert m["false_refusal"] == (0.0, 1.0) and m["correct_refusal"] == (0.0, 0.0)
    assert m["steps"] == (6, 1.0) and m["critique_cycles"] == (1, 1.0)
    assert m["termination:converged"] == (1.0, 1.0)
    rm = retrieval_metrics(r)
    assert rm["first_recall@k"] == (1.0, 1.0)
    assert rm["first_mrr@k"] == (0.5, 1.0) and rm["first_map"] == (0.5, 1.0)
    assert rm["final_mrr@k"] == (1.0, 1.0)  # c2 has the best grade among the chunks kept


def test_rewrite_success_loop_rate_and_unanswerable_negatives() -> None:
    r = rec(
        [
            step("retrieve", chunk_ids=["c1"]),
            step("grade", "INCORRECT", scores={"c1": 0.1}, kept=[]),
            step("rewrite", query="q2", duplicate=False),
            step("retrieve", chunk_ids=["c2"]),
            step("grade", "CORRECT", scores={"c2": 0.8}, kept=["c2"]),
            step("rewrite", query="q2", duplicate=True),
            step("finalize"),
        ],
        {"c1": 0.1, "c2": 0.8},
    )
    m = agent_metrics(r)
    assert m["rewrite_success"] == (1, 2)  # the duplicate one spent budget and found nothing
    assert m["loop_rate_answerable"] == (1.0, 1.0) and m["loop_rate_unanswerable"] == (0.0, 0.0)
    # grade 1: context {c1} holds no gold, nothing kept -> TN; grade 2: context {c1, c2} -> TP
    assert m["grader_set_accuracy"] == (2, 2)

    u = rec(
        [step("retrieve", chunk_ids=["c2"]), step("grade", "CORRECT", scores={"c2": 0.9}, kept=["c2"])],
        {"c2": 0.9},
        kind="unanswerable",
        should_refuse=True,
        gold_docs=[],
    )
    mu = agent_metrics(u)
    assert mu["grader_set_precision"] == (0, 1)  # passing anything for an unanswerable item is a false positive
    assert mu["correct_refusal"] == (0.0, 1.0) and mu["false_refusal"] == (0.0, 0.0)
    assert "first_recall@k" not in {k for k, v in retrieval_metrics(u).items() if v[1] > 0}


def test_outcomes_squad_scoring_and_e2e() -> None:
    ans = rec([], {}, suite="squad", answers=["1887"], answer="It opened in 1887 [1].")
    o = outcome_metrics(ans)
    assert o["e2e_accuracy"] == (1.0, 1.0) and o["answer_contains_gold"] == (1.0, 1.0)
    assert o["squad_em"] == (0.0, 1.0)
    assert o["squad_f1"][0] == pytest.approx(0.4)  # [it, opened, in, 1887] vs [1887]: P 1/4, R 1, F1 2PR/(P+R)
    refused_unans = rec([], {}, suite="squad", should_refuse=True, kind="unanswerable", refused=True, answers=[])
    o = outcome_metrics(refused_unans)
    assert o["e2e_accuracy"] == (1.0, 1.0) and o["squad_em"] == (1.0, 1.0) and o["squad_noans_accuracy"] == (1.0, 1.0)
    refused_ans = rec([], {}, suite="squad", answers=["1887"], refused=True)
    assert outcome_metrics(refused_ans)["e2e_accuracy"] == (0.0, 1.0)
    under = rec([], {}, kind="underspecified", reference="Which one?")
    assert "e2e_accuracy" not in outcome_metrics(under)
    judged = rec([], {}, reference="In 1887.", judged={"judge_correct_p": 0.8, "faithfulness": None})
    o = outcome_metrics(judged)
    assert o["e2e_accuracy"] == (1.0, 1.0) and o["faithfulness"] == (0.0, 0.0)
    assert item_metrics({**judged, "error": "boom"}) == {}


def test_diagnosis_labels() -> None:
    grade_in = step("grade", "CORRECT", scores={"c1": 0.9}, kept=["c1"])
    fp = rec(
        [step("retrieve", chunk_ids=["c1"]), grade_in],
        {"c1": 0.9},
        kind="unanswerable",
        should_refuse=True,
        gold_docs=[],
    )
    assert is_failure(fp) and diagnose(fp)[0] == "grader false positive"
    miss = rec([step("retrieve", chunk_ids=["c1"]), grade_in], {"c1": 0.9}, answers=["1887"], answer="No.")
    assert diagnose(miss)[0] == "retrieval miss"
    fn = rec(
        [step("retrieve", chunk_ids=["c2"]), step("grade", "INCORRECT", scores={"c2": 0.1}, kept=[])],
        {"c2": 0.1},
        refused=True,
        answers=["1887"],
    )
    assert diagnose(fn)[0] == "grader false negative"
    loop = rec(
        [step("retrieve", chunk_ids=["c1"]), step("rewrite"), step("retrieve", chunk_ids=["c1"]), step("rewrite")],
        {"c1": 0.1},
        refused=True,
        answers=["1887"],
    )
    assert diagnose(loop)[0] == "rewrite loop"
    gen = rec(
        [step("retrieve", chunk_ids=["c2"]), step("grade", "CORRECT", scores={"c2": 0.9}, kept=["c2"])],
        {"c2": 0.9},
        answers=["1887"],
        answer="Something else [1].",
    )
    assert diagnose(gen)[0] == "generation error"
    crit = rec(
        [step("retrieve", chunk_ids=["c2"]), step("grade", "CORRECT", kept=["c2"]), step("critique")],
        {"c2": 0.9},
        answers=["1887"],
        answer="Something else [1].",
    )
    assert diagnose(crit)[0] == "critique miss"
    ok = rec([step("retrieve", chunk_ids=["c2"])], {"c2": 0.9}, answers=["1887"], answer="In 1887 [1].")
    assert not is_failure(ok)


def test_refusal_curve_from_max_grades() -> None:
    records = [
        rec([], {"c1": 0.9}),
        rec([], {"c1": 0.5}),
        rec([], {"c1": 0.2}, should_refuse=True, kind="unanswerable"),
        rec([], {"c1": 0.6}, should_refuse=True, kind="unanswerable"),
    ]
    prec, recall = refusal_curve(records, [0.0, 0.3, 0.55, 0.7, 1.0])
    assert prec[0] != prec[0] and recall[0] == 0.0  # nothing refused at tau 0
    assert prec[1] == 1.0 and recall[1] == 0.5  # refuses only the 0.2 item
    assert prec[2] == pytest.approx(0.5) and recall[2] == 0.5  # + the 0.5 answerable one
    assert prec[3] == pytest.approx(2 / 3) and recall[3] == 1.0
    assert prec[4] == pytest.approx(0.5) and recall[4] == 1.0
