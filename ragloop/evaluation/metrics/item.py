"""All metrics of one result record as `(numerator, denominator)` pairs, by name.

Agent records: retrieval on the first retrieval and on the final context, the agent's
decisions, operations, the judged answer metrics (stored in the record by the runner), string
matches against the gold answers / reference, and end-to-end accuracy. Retrieval-only records
(CACM): ranking metrics over the retrieved passages. Definitions: docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragloop.evaluation.metrics.agent import NONE, Pair, agent_metrics, frac, retrieval_metrics, value
from ragloop.evaluation.metrics.answer import answer_body, squad_scores, strip_citations, token_f1
from ragloop.evaluation.metrics.ops import ops_metrics
from ragloop.evaluation.metrics.retrieval import (
    average_precision,
    dedupe,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)

CORRECT_THRESHOLD = 0.5
"""A judged correctness probability at or above this counts as a correct answer."""


def ranking_only_metrics(rec: Mapping[str, Any]) -> dict[str, Pair]:
    relevant = set(rec.get("gold_docs") or [])
    if not relevant or rec.get("error"):
        return {}
    ranked = dedupe(rec.get("ranking") or [])
    return {
        "recall@10": (recall_at_k(ranked, relevant, 10), 1.0),
        "recall@100": (recall_at_k(ranked, relevant, 100), 1.0),
        "mrr@10": (reciprocal_rank(ranked, relevant, 10), 1.0),
        "ndcg@10": (ndcg_at_k(ranked, relevant, 10), 1.0),
        "p@30": (precision_at_k(ranked, relevant, 30), 1.0),
        "map": (average_precision(ranked, relevant), 1.0),
    }


def answer_correct(rec: Mapping[str, Any]) -> bool | None:
    """Is the (non-refused) answer right? Short gold spans: a span occurs in the answer.
    Otherwise the judge's correctness p >= 0.5, or without a judge token F1 >= 0.5."""
    if rec.get("refused"):
        return False
    answers = rec.get("answers") or []
    if answers:
        return squad_scores(str(rec.get("answer") or ""), False, answers, False).contains >= 1.0
    p = (rec.get("judged") or {}).get("judge_correct_p")
    if p is not None:
        return float(p) >= CORRECT_THRESHOLD
    ref = str(rec.get("reference") or "")
    if not ref:
        return None
    return token_f1(strip_citations(answer_body(str(rec.get("answer") or ""))), ref) >= 0.5


def outcome_metrics(rec: Mapping[str, Any]) -> dict[str, Pair]:
    kind = str(rec.get("kind") or "answerable")
    should_refuse = bool(rec.get("should_refuse"))
    refused = bool(rec.get("refused"))
    out: dict[str, Pair] = {}
    # end-to-end: refusing an unanswerable item is right, refusing an answerable one wrong
    if should_refuse:
        out["e2e_accuracy"] = frac(refused)
    elif kind != "underspecified":
        ok = answer_correct(rec)
        out["e2e_accuracy"] = NONE if ok is None else frac(ok)
        out["answer_accuracy_answered"] = NONE if refused or ok is None else frac(ok)
    # SQuAD: a record carries gold spans or is an unanswerable SQuAD question
    if rec.get("suite") == "squad" or rec.get("answers"):
        s = squad_scores(str(rec.get("answer") or ""), refused, rec.get("answers") or [], should_refuse)
        out["squad_em"] = (s.exact, 1.0)
        out["squad_f1"] = (s.f1, 1.0)
        if should_refuse:
            out["squad_noans_accuracy"] = (s.exact, 1.0)
        else:
            out["squad_hasans_f1"] = (s.f1, 1.0)
            out["answer_contains_gold"] = (s.contains, 1.0)
    # correctness against the reference in words (token F1; a refusal scores 0)
    ref = str(rec.get("reference") or "")
    if ref and not should_refuse and kind != "underspecified" and not rec.get("answers"):
        text = strip_citations(answer_body(str(rec.get("answer") or "")))
        out["token_f1"] = (0.0 if refused else token_f1(text, ref), 1.0)
    if not refused:
        out["answer_words"] = (float(len(strip_citations(answer_body(str(rec.get("answer") or ""))).split())), 1.0)
    judged = rec.get("judged") or {}
    for key, v in judged.items():
        out[key] = value(v)
    if judged.get("judge_correct_p") is not None:
        out["judge_correct"] = frac(float(judged["judge_correct_p"]) >= CORRECT_THRESHOLD)
    return out


def item_metrics(rec: Mapping[str, Any]) -> dict[str, Pair]:
    if rec.get("mode") == "retrieval":
        return ranking_only_metrics(rec)
    if rec.get("error"):
        return {}
    return retrieval_metrics(rec) | agent_metrics(rec) | ops_metrics(rec) | outcome_metrics(rec)
