"""Failure cases: which items failed end to end, why (the diagnosis labels of docs/metrics.md), a
spread of examples across labels, and their traces as text. Apart from the report because it reads
one result record at a time and knows nothing of configs or suites."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragloop.agent.details import GradeDetail, RetrieveDetail, RewriteDetail
from ragloop.evaluation.metrics.agent import ItemView
from ragloop.evaluation.metrics.item import outcome_metrics
from ragloop.evaluation.records import ResultRecord

MAX_FAILURES = 5


def is_failure(rec: Mapping[str, Any] | ResultRecord) -> bool:
    r = ResultRecord.load(rec)
    if r.mode != "agent" or r.error:
        return False
    acc = outcome_metrics(r).get("e2e_accuracy")
    return acc is not None and acc[1] > 0 and acc[0] < 1.0


def diagnose(rec: Mapping[str, Any] | ResultRecord) -> tuple[str, str]:
    """(label, explanation) of a failed item: grader false positive / false negative,
    retrieval miss, rewrite loop, critique miss, generation error (docs/metrics.md)."""
    v = ItemView(rec)
    r = v.rec
    grades = {c: x.grade for c, x in v.chunks.items() if x.grade is not None}
    gold_seen = [c for c in v.chunks if v.is_gold(c)]
    gold_kept = [c for c in gold_seen if c in grades and grades[c] >= v.tau_lower]
    rewrites = len(v.of("rewrite"))
    cycles = len(v.of("critique"))
    found = len(r.deficiencies)
    if v.should_refuse:
        best = max(
            grades.items(),
            key=lambda t: t[1],
            default=(None, 0.0),
        )
        note = f"; critique ran {cycles} cycle(s), found {found} deficiencies and did not stop it" if cycles else ""
        return (
            "grader false positive",
            f"should be refused, but the grader passed {best[0]} (grade {best[1]:.2f} >= tau_L {v.tau_lower}) "
            f"and an answer was generated from it{note}",
        )
    if r.refused:
        if v.rewrite_on and rewrites >= v.max_rewrites > 0 and not gold_seen:
            return (
                "rewrite loop",
                f"{rewrites} rewrites never retrieved a gold chunk; refused ({r.termination_reason})",
            )
        if not gold_seen:
            return "retrieval miss", f"no gold chunk among the {len(v.chunks)} retrieved; refused"
        if not gold_kept:
            shown = ", ".join(f"{c} {grades.get(c)}" for c in gold_seen[:3])
            return "grader false negative", f"gold retrieved but graded below tau_L {v.tau_lower} ({shown}); refused"
        return (
            "generation error",
            f"gold passed grading but the turn ended in a refusal ({r.termination_reason}): "
            "validation or critique rejected the drafts",
        )
    if not gold_seen:
        return "retrieval miss", f"answered from {len(v.chunks)} chunks, none of them gold"
    if not gold_kept:
        return "grader false negative", "gold retrieved but graded out; the answer came from other chunks"
    if cycles and not found:
        return "critique miss", "the answer is wrong and the critique found no deficiency"
    return "generation error", "gold passed grading, but the composed answer does not hold the gold answer"


def pick_failures(
    records: Sequence[dict[str, Any]], limit: int = MAX_FAILURES
) -> tuple[list[tuple[dict[str, Any], str, str]], Counter[str]]:
    by_label: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for rec in records:
        if is_failure(rec):
            label, why = diagnose(rec)
            by_label.setdefault(label, []).append((rec, why))
    counts = Counter({k: len(v) for k, v in by_label.items()})
    labels = [lab for lab, _ in counts.most_common()]
    picked: list[tuple[dict[str, Any], str, str]] = []
    i = 0
    while len(picked) < limit and any(i < len(by_label[lab]) for lab in labels):
        for lab in labels:
            if i < len(by_label[lab]) and len(picked) < limit:
                rec, why = by_label[lab][i]
                picked.append((rec, lab, why))
        i += 1
    return picked, counts


def render_trace(rec: Mapping[str, Any] | ResultRecord, max_lines: int = 24) -> str:
    v = ItemView(rec)
    lines = []
    for r in v.trace.records:
        d = r.detail
        extra = ""
        if isinstance(d, RetrieveDetail):
            marks = ["*" if v.is_gold(c) else "" for c in d.chunk_ids]
            extra = f" queries={d.queries} chunks={[c + m for c, m in zip(d.chunk_ids, marks, strict=True)]}"
        elif isinstance(d, GradeDetail):
            top = sorted(d.scores.items(), key=lambda kv: -kv[1])[:3]
            extra = " scores=" + ", ".join(f"{c}{'*' if v.is_gold(c) else ''}:{s:.2f}" for c, s in top)
        elif isinstance(d, RewriteDetail):
            extra = f" query={d.query!r}"
        lines.append(f"{r.node}: {r.decision}{extra} ({r.latency_ms:.0f} ms)")
    if len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], f"... {len(lines) - max_lines + 1} more steps"]
    return "\n".join(lines)
