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
from ragloop.evaluation.metrics.answer import answer_body, judge_correct, squad_scores, strip_citations, token_f1
from ragloop.evaluation.metrics.ops import ops_metrics
from ragloop.evaluation.metrics.retrieval import (
    average_precision,
    dedupe,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)
from ragloop.evaluation.records import ResultRecord
from ragloop.models.scoring.base import Scorer

CORRECT_THRESHOLD = 0.5
"""A judged correctness probability at or above this counts as a correct answer."""
SPAN_WORDS = 5
"""An expected answer of at most this many words is a span (SQuAD-style)."""


async def expected_answer_correct(judge: Scorer, answer: str, expected: str, question: str = "") -> bool:
    """`answer_correct`'s rule for one expected answer, where no gold-span list exists (a golden
    entry, a diagnosis's ideal answer): a span (<= `SPAN_WORDS` words) must occur in the answer; a
    reference in words must have at least `CORRECT_THRESHOLD` of its claims supported by the answer,
    through `judge` (the offline `lexical` one is what the simulation measures with)."""
    if len(expected.split()) <= SPAN_WORDS:
        return squad_scores(answer, False, [expected], False).contains >= 1.0
    p = await judge_correct(judge, answer, expected, question)
    return p is not None and p >= CORRECT_THRESHOLD


def ranking_only_metrics(rec: Mapping[str, Any] | ResultRecord) -> dict[str, Pair]:
    r = ResultRecord.load(rec)
    relevant = set(r.gold_docs)
    if not relevant or r.error:
        return {}
    ranked = dedupe(r.ranking)
    return {
        "recall@10": (recall_at_k(ranked, relevant, 10), 1.0),
        "recall@100": (recall_at_k(ranked, relevant, 100), 1.0),
        "mrr@10": (reciprocal_rank(ranked, relevant, 10), 1.0),
        "ndcg@10": (ndcg_at_k(ranked, relevant, 10), 1.0),
        "p@30": (precision_at_k(ranked, relevant, 30), 1.0),
        "map": (average_precision(ranked, relevant), 1.0),
    }


def answer_correct(rec: Mapping[str, Any] | ResultRecord) -> bool | None:
    """Is the (non-refused) answer right? Short gold spans: a span occurs in the answer.
    Otherwise the judge's correctness p >= 0.5, or without a judge token F1 >= 0.5."""
    r = ResultRecord.load(rec)
    if r.refused:
        return False
    if r.answers:
        return squad_scores(r.answer, False, r.answers, False).contains >= 1.0
    p = r.judged.get("judge_correct_p")
    if p is not None:
        return p >= CORRECT_THRESHOLD
    if not r.reference:
        return None
    return token_f1(strip_citations(answer_body(r.answer)), r.reference) >= 0.5


def outcome_metrics(rec: Mapping[str, Any] | ResultRecord) -> dict[str, Pair]:
    r = ResultRecord.load(rec)
    kind = r.kind or "answerable"
    should_refuse = r.should_refuse
    refused = r.refused
    out: dict[str, Pair] = {}
    # end-to-end: refusing an unanswerable item is right, refusing an answerable one wrong
    if should_refuse:
        out["e2e_accuracy"] = frac(refused)
    elif kind != "underspecified":
        ok = answer_correct(r)
        out["e2e_accuracy"] = NONE if ok is None else frac(ok)
        out["answer_accuracy_answered"] = NONE if refused or ok is None else frac(ok)
    # SQuAD: a record carries gold spans or is an unanswerable SQuAD question
    if r.suite == "squad" or r.answers:
        s = squad_scores(r.answer, refused, r.answers, should_refuse)
        out["squad_em"] = (s.exact, 1.0)
        out["squad_f1"] = (s.f1, 1.0)
        if should_refuse:
            out["squad_noans_accuracy"] = (s.exact, 1.0)
        else:
            out["squad_hasans_f1"] = (s.f1, 1.0)
            out["answer_contains_gold"] = (s.contains, 1.0)
    # correctness against the reference in words (token F1; a refusal scores 0)
    ref = r.reference
    if ref and not should_refuse and kind != "underspecified" and not r.answers:
        text = strip_citations(answer_body(r.answer))
        out["token_f1"] = (0.0 if refused else token_f1(text, ref), 1.0)
    if not refused:
        out["answer_words"] = (float(len(strip_citations(answer_body(r.answer)).split())), 1.0)
    for key, v in r.judged.items():
        out[key] = value(v)
    p = r.judged.get("judge_correct_p")
    if p is not None:
        out["judge_correct"] = frac(p >= CORRECT_THRESHOLD)
    return out


def item_metrics(rec: Mapping[str, Any] | ResultRecord) -> dict[str, Pair]:
    r = ResultRecord.load(rec)
    if r.mode == "retrieval":
        return ranking_only_metrics(r)
    if r.error:
        return {}
    return retrieval_metrics(r) | agent_metrics(r) | ops_metrics(r) | outcome_metrics(r)
