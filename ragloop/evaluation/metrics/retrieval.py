"""Ranking metrics for one query; average them over queries with `mean` (MAP = mean of AP).

Conventions shared by every function here:

- `ranked` is the system's ranking, best first, as document ids. An id repeated further down
  (several chunks of one document) counts at its first position only, so chunk-level hits can
  be passed after mapping each to its document id; positions are those of the deduplicated list.
- `relevant` is either a collection of relevant ids (binary judgements) or a mapping id ->
  grade; a document is relevant when its grade is > 0. Only `ndcg_at_k` uses the grades.
- Ranks start at 1. `k=None` means the whole ranking.
- Metrics whose definition divides by the number of relevant documents (recall, AP, nDCG)
  raise `ValueError` when there are none, instead of silently scoring 0: such a query carries
  no information and must be filtered out by the caller (trec_eval skips it as well).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Literal

Relevant = Collection[str] | Mapping[str, float]
Gain = Literal["linear", "exponential"]


def dedupe(ranked: Iterable[str]) -> list[str]:
    """The ranking with repeated ids removed, first occurrence kept."""
    return list(dict.fromkeys(ranked))


def _grades(relevant: Relevant) -> dict[str, float]:
    if isinstance(relevant, Mapping):
        return {str(d): float(g) for d, g in relevant.items() if float(g) > 0}
    return {str(d): 1.0 for d in relevant}


def _top(ranked: Sequence[str], k: int | None) -> list[str]:
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    docs = dedupe(ranked)
    return docs if k is None else docs[:k]


def _need_relevant(grades: Mapping[str, float], metric: str) -> None:
    if not grades:
        raise ValueError(f"{metric} is undefined for a query with no relevant documents")


def recall_at_k(ranked: Sequence[str], relevant: Relevant, k: int | None = None) -> float:
    """|relevant ∩ top k| / |relevant|.

    Not capped at k: with 8 relevant documents, recall@5 is at most 5/8.
    """
    grades = _grades(relevant)
    _need_relevant(grades, "recall")
    return sum(1 for d in _top(ranked, k) if d in grades) / len(grades)


def hit_at_k(ranked: Sequence[str], relevant: Relevant, k: int | None = None) -> float:
    """1.0 if at least one relevant document is in the top k, else 0.0 (success@k)."""
    grades = _grades(relevant)
    return 1.0 if any(d in grades for d in _top(ranked, k)) else 0.0


def precision_at_k(ranked: Sequence[str], relevant: Relevant, k: int) -> float:
    """|relevant ∩ top k| / k.

    The denominator is k even when fewer than k documents were retrieved (the TREC
    convention): a system that returns 3 documents, all relevant, has P@30 = 0.1.
    """
    grades = _grades(relevant)
    return sum(1 for d in _top(ranked, k) if d in grades) / k


def reciprocal_rank(ranked: Sequence[str], relevant: Relevant, k: int | None = None) -> float:
    """1 / (rank of the first relevant document), or 0 when none is in the top k.

    MRR@k is the mean of this over queries.
    """
    grades = _grades(relevant)
    for rank, d in enumerate(_top(ranked, k), start=1):
        if d in grades:
            return 1.0 / rank
    return 0.0


def average_precision(ranked: Sequence[str], relevant: Relevant, k: int | None = None) -> float:
    """(1 / |relevant|) * sum over ranks i <= k holding a relevant document of P@i.

    The denominator is the number of relevant documents for the query, *not* the number of
    relevant documents retrieved: a relevant document that is never retrieved contributes 0
    (as in trec_eval's `map`). MAP is the mean of this over queries.
    """
    grades = _grades(relevant)
    _need_relevant(grades, "average precision")
    found = 0
    total = 0.0
    for rank, d in enumerate(_top(ranked, k), start=1):
        if d in grades:
            found += 1
            total += found / rank
    return total / len(grades)


def _gain(grade: float, gain: Gain) -> float:
    return grade if gain == "linear" else 2.0**grade - 1.0


def ndcg_at_k(ranked: Sequence[str], relevant: Relevant, k: int, gain: Gain = "linear") -> float:
    """DCG@k / IDCG@k with DCG@k = sum_{i=1..k} gain(grade_i) / log2(i + 1).

    `grade_i` is the judged grade of the document at rank i (0 when unjudged); gain is the
    grade itself ("linear", trec_eval's `ndcg_cut`) or 2^grade - 1 ("exponential", Burges et
    al.); with binary judgements both give gain 1 per relevant document. IDCG@k is the DCG of
    the ideal ranking: all judged documents sorted by grade, cut at k.
    """
    grades = _grades(relevant)
    _need_relevant(grades, "nDCG")
    top = _top(ranked, k)
    dcg = sum(_gain(grades[d], gain) / math.log2(i + 1) for i, d in enumerate(top, start=1) if d in grades)
    ideal = sorted((_gain(g, gain) for g in grades.values()), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    return dcg / idcg


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean; raises on an empty input rather than inventing a score."""
    vals = list(values)
    if not vals:
        raise ValueError("mean of no values")
    return math.fsum(vals) / len(vals)
