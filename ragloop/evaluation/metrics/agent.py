"""Per-item metrics of the graph's decisions, computed from one result record of the runner.

Every metric is returned as a `(numerator, denominator)` pair (see `ragloop.evaluation.stats`):
a denominator of 0 means "this item does not carry the metric". The report sums numerators and
denominators over items, so pooled rates (chunk-level grader precision) and per-item means
(steps) share one aggregation and one bootstrap. The exact definitions are in docs/metrics.md.

A record (`runner.Record`) holds, for the item's *final* turn: the trace records (node, decision,
detail), every chunk seen with its passage id and grade, the deficiencies, the refusal flag and
termination reason, and the item's gold: passage ids and/or chunk ids, and whether it should be
refused. An item that should be refused has no gold for grading: no chunk answers it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragloop.agent.details import ExternalSearchDetail, GradeDetail, RetrieveDetail, RewriteDetail
from ragloop.agent.trace import Trace
from ragloop.agent.types import TraceRecord
from ragloop.evaluation.metrics.retrieval import (
    average_precision,
    dedupe,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank,
)
from ragloop.evaluation.records import ChunkSeen, ResultRecord

Pair = tuple[float, float]
NONE: Pair = (0.0, 0.0)
ANSWERABLE_KINDS = frozenset({"answerable", "partial", "vague"})
VERDICTS = ("CORRECT", "AMBIGUOUS", "INCORRECT")


def frac(ok: bool) -> Pair:
    return (1.0 if ok else 0.0, 1.0)


def value(v: float | None) -> Pair:
    return NONE if v is None else (float(v), 1.0)


class ItemView:
    """Read-only helpers over one record."""

    def __init__(self, rec: Mapping[str, Any] | ResultRecord) -> None:
        self.rec = ResultRecord.load(rec)
        r = self.rec
        self.trace: Trace = r.typed_trace
        """Typed: a detail field that the node's model does not define fails mypy here."""
        self.chunks: Mapping[str, ChunkSeen] = r.chunks
        self.gold_docs = set(r.gold_docs)
        self.gold_chunks = set(r.gold_chunks)
        self.kind = r.kind or "answerable"
        self.should_refuse = r.should_refuse
        self.refused = r.refused
        b = r.budgets
        self.tau_lower = b.tau_lower
        self.tau_upper = b.tau_upper
        self.max_rewrites = b.max_rewrites
        self.rewrite_on = b.rewrite
        self.k = b.k

    # -- gold -------------------------------------------------------------------------------
    @property
    def answerable(self) -> bool:
        return not self.should_refuse and self.kind in ANSWERABLE_KINDS

    @property
    def has_gold(self) -> bool:
        return not self.should_refuse and bool(self.gold_docs or self.gold_chunks)

    def passage(self, chunk_id: str) -> str:
        c = self.chunks.get(chunk_id)
        return (c.passage or c.doc_id or chunk_id) if c is not None else chunk_id

    def is_gold(self, chunk_id: str) -> bool:
        if self.should_refuse:
            return False
        if self.gold_chunks and chunk_id in self.gold_chunks:
            return True
        return bool(self.gold_docs) and self.passage(chunk_id) in self.gold_docs

    def relevant_ids(self) -> tuple[set[str], bool]:
        """(relevant ids, ranked by chunk id?): passages when the item names gold passages,
        else chunk ids."""
        if self.gold_docs:
            return self.gold_docs, False
        return self.gold_chunks, True

    # -- trace ------------------------------------------------------------------------------
    def of(self, node: str) -> list[TraceRecord]:
        return self.trace.of(node)

    def first_retrieval(self) -> list[str]:
        first = self.trace.first(RetrieveDetail)
        return list(first.chunk_ids) if first is not None else []

    def final_context(self) -> list[str]:
        """Chunks that passed grading (grade >= tau_L) by grade, best first; empty on a refusal."""
        if self.refused:
            return []
        graded = [(cid, c.grade) for cid, c in self.chunks.items() if c.grade is not None and c.grade >= self.tau_lower]
        return [cid for cid, _ in sorted(graded, key=lambda x: -x[1])]

    def grade_steps(self) -> list[tuple[str, GradeDetail, set[str]]]:
        """(verdict, grade detail, context at that step) for each grade step: the context is every
        chunk retrieved (or found by external search) earlier in the turn."""
        seen: set[str] = set()
        out = []
        for r in self.trace.records:
            d = r.detail
            if isinstance(d, RetrieveDetail | ExternalSearchDetail):
                seen.update(d.chunk_ids)
            elif isinstance(d, GradeDetail):
                seen.update(d.scores)
                out.append((r.decision, d, set(seen)))
        return out

    def max_grade(self) -> float | None:
        grades = [c.grade for c in self.chunks.values() if c.grade is not None]
        return max(grades) if grades else None


def ranking_metrics(ranked_chunks: Sequence[str], view: ItemView, k: int, prefix: str) -> dict[str, Pair]:
    relevant, by_chunk = view.relevant_ids()
    if view.should_refuse or not relevant:
        return {f"{prefix}_recall@k": NONE, f"{prefix}_mrr@k": NONE, f"{prefix}_ndcg@10": NONE, f"{prefix}_map": NONE}
    ranked = dedupe(ranked_chunks if by_chunk else [view.passage(c) for c in ranked_chunks])
    return {
        f"{prefix}_recall@k": (recall_at_k(ranked, relevant, k), 1.0),
        f"{prefix}_mrr@k": (reciprocal_rank(ranked, relevant, k), 1.0),
        f"{prefix}_ndcg@10": (ndcg_at_k(ranked, relevant, 10), 1.0),
        f"{prefix}_map": (average_precision(ranked, relevant), 1.0),
    }


def retrieval_metrics(rec: Mapping[str, Any] | ResultRecord) -> dict[str, Pair]:
    v = ItemView(rec)
    out = ranking_metrics(v.first_retrieval(), v, v.k, "first")
    final = v.final_context()
    out |= ranking_metrics(final, v, max(v.k, len(final) or 1), "final")
    return out


def _confusion(pairs: Iterable[tuple[bool, bool]]) -> tuple[int, int, int, int]:
    tp = fp = fn = tn = 0
    for predicted, actual in pairs:
        if predicted and actual:
            tp += 1
        elif predicted:
            fp += 1
        elif actual:
            fn += 1
        else:
            tn += 1
    return tp, fp, fn, tn


def agent_metrics(rec: Mapping[str, Any] | ResultRecord) -> dict[str, Pair]:
    v = ItemView(rec)
    out: dict[str, Pair] = {}
    if v.rec.error:
        return out
    # grader, set level: one prediction per grade step
    steps = v.grade_steps()
    set_preds = [(bool(d.kept), any(v.is_gold(c) for c in ctx)) for _, d, ctx in steps]
    tp, fp, fn, tn = _confusion(set_preds)
    out["grader_set_precision"] = (tp, tp + fp)
    out["grader_set_recall"] = (tp, tp + fn)
    out["grader_set_accuracy"] = (tp + tn, tp + fp + fn + tn)
    # grader, chunk level: one prediction per graded chunk
    chunk_preds = [(float(s) >= v.tau_lower, v.is_gold(cid)) for _, d, _ in steps for cid, s in d.scores.items()]
    tp, fp, fn, _ = _confusion(chunk_preds)
    out["grader_chunk_precision"] = (tp, tp + fp)
    out["grader_chunk_recall"] = (tp, tp + fn)
    # CRAG verdict of the first grade step
    if steps:
        verdict, _, ctx = steps[0]
        positive = any(v.is_gold(c) for c in ctx)
        for name in VERDICTS:
            out[f"verdict_{name.lower()}"] = frac(verdict == name)
        out["verdict_accuracy"] = frac((verdict == "CORRECT" and positive) or (verdict == "INCORRECT" and not positive))
    # refusals
    out["correct_refusal"] = frac(v.refused) if v.should_refuse else NONE
    out["false_refusal"] = frac(v.refused) if v.answerable else NONE
    out["refusal_underspecified"] = frac(v.refused) if v.kind == "underspecified" else NONE
    # rewrites
    rewrites = v.of("rewrite")
    out["rewrites"] = (len(rewrites), 1.0)
    if v.has_gold:
        succ = 0
        details = [r.detail for r in v.trace.records]
        for i, rw in enumerate(details):
            if not isinstance(rw, RewriteDetail) or rw.duplicate:
                continue
            gold_found = False
            passed = False
            for later in details[i + 1 :]:
                if isinstance(later, RewriteDetail):
                    break
                if isinstance(later, RetrieveDetail | ExternalSearchDetail):
                    gold_found = gold_found or any(v.is_gold(c) for c in later.chunk_ids)
                if isinstance(later, GradeDetail):
                    passed = bool(later.kept)
                    break
            succ += passed and gold_found
        out["rewrite_success"] = (succ, len(rewrites))
    hit_budget = v.rewrite_on and v.max_rewrites > 0 and len(rewrites) >= v.max_rewrites
    out["loop_rate_answerable"] = frac(hit_budget) if v.answerable else NONE
    out["loop_rate_unanswerable"] = frac(hit_budget) if v.should_refuse else NONE
    # effort
    out["steps"] = (len(v.trace.records), 1.0)
    out["critique_cycles"] = (len(v.of("critique")), 1.0)
    defs = v.rec.deficiencies
    found = len(defs)
    resolved = sum(1 for d in defs if d.status == "addressed")
    out["deficiencies_found"] = (found, 1.0)
    out["deficiencies_resolved"] = (resolved, 1.0)
    out["deficiency_resolution_rate"] = (resolved, found)
    # termination reasons
    reason = v.rec.termination_reason
    out[f"termination:{reason}"] = (1.0, 1.0)
    return out
