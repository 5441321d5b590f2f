"""Combining per-retriever result lists into one ranking.

Inputs are keyed by retriever name ("bm25", "dense", ...). Rank fusion takes id lists; score
fusion takes the `(ids, scores)` array pairs the indexes return (padding ids < 0 are ignored,
so `search_many` rows can be passed as they are). Outputs are `(doc, score)` lists, best first,
equal scores ordered by lower doc index so results never depend on dict or hash order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

Normalization = Literal["minmax", "zscore"]


def _sorted(scores: Mapping[int, float]) -> list[tuple[int, float]]:
    return sorted(((int(d), float(s)) for d, s in scores.items()), key=lambda x: (-x[1], x[0]))


def _weight(weights: Mapping[str, float] | None, name: str) -> float:
    if weights is None:
        return 1.0
    if name not in weights:
        raise ValueError(f"no fusion weight for retriever {name!r} (weights given: {sorted(weights)})")
    w = float(weights[name])
    if not np.isfinite(w) or w < 0:
        raise ValueError(f"fusion weight for {name!r} must be a finite number >= 0, got {w}")
    return w


def rrf(
    rankings: Mapping[str, Sequence[int]], k: int = 60, weights: Mapping[str, float] | None = None
) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: score(d) = sum_r w_r / (k + rank_r(d)), ranks starting at 1.

    Only ranks matter, so retrievers with incomparable score scales fuse without tuning; `k`
    damps the advantage of the very top ranks. A document listed twice by one retriever counts
    at its best rank only. Negative ids (padding) are skipped without taking a rank.
    """
    if k < 1:
        raise ValueError(f"rrf k must be >= 1, got {k}")
    fused: dict[int, float] = {}
    for name in sorted(rankings):  # fixed summation order: identical floats on every run
        w = _weight(weights, name)
        seen: set[int] = set()
        rank = 0
        for doc in rankings[name]:
            d = int(doc)
            if d < 0 or d in seen:
                continue
            seen.add(d)
            rank += 1
            fused[d] = fused.get(d, 0.0) + w / (k + rank)
    return _sorted(fused)


def normalize(scores: np.ndarray, method: Normalization) -> np.ndarray:
    """Put one retriever's scores on a comparable scale.

    A list without spread (one candidate, or all scores equal) has no scale to learn. minmax
    maps it to all ones: these candidates are the retriever's best answers, exactly like the top
    of a spread-out list, and mapping them to 0 would make "retrieved" look like "not retrieved"
    (which is also 0). zscore maps it to all zeros: every score sits at its own mean.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"expected a 1-D score array, got shape {list(s.shape)}")
    if not np.isfinite(s).all():
        raise ValueError("scores contain NaN or infinity")
    if method == "minmax":
        if s.size == 0:
            return s
        lo, hi = s.min(), s.max()
        return np.ones_like(s) if hi - lo <= 0 else (s - lo) / (hi - lo)
    if method == "zscore":
        if s.size == 0:
            return s
        std = s.std()
        return np.zeros_like(s) if std <= 0 else (s - s.mean()) / std
    raise ValueError(f"unknown normalization {method!r}; expected 'minmax' or 'zscore'")


def _floor(norm: np.ndarray, method: Normalization) -> float:
    """Score for a candidate this retriever did not return; see `weighted`."""
    if method == "minmax":
        return 0.0
    return float(norm.min()) if norm.size and norm.max() > norm.min() else -1.0


def weighted(
    results: Mapping[str, tuple[np.ndarray, np.ndarray]],
    weights: Mapping[str, float],
    method: Normalization = "minmax",
) -> list[tuple[int, float]]:
    """Convex combination of normalised scores over the union of all retrievers' candidates.

    Weights of the retrievers present are rescaled to sum to 1, so with minmax every fused score
    is in [0, 1] whatever weights the config holds.

    A candidate one retriever did not return still needs a score from it. It fell below that
    retriever's cut-off, so its true score is at most the lowest one returned: we use that floor,
    which is 0 under minmax (the bottom of the list's range) and the smallest z-score under
    zscore. A floor, rather than skipping the term, keeps a document that only one retriever
    liked from beating one that both ranked well. When a zscore list has no spread its floor
    would equal its (zero) scores, so missing candidates get -1 instead: one standard unit
    below, keeping "was retrieved" worth something. Duplicate ids keep their highest score.
    """
    present = {name: _weight(weights, name) for name in sorted(results)}
    total = sum(present.values())
    if present and total <= 0:
        raise ValueError("fusion weights of the retrievers present sum to zero")
    per_retriever: dict[str, tuple[dict[int, float], float]] = {}
    union: set[int] = set()
    for name in present:
        ids_raw, scores_raw = results[name]
        ids = np.asarray(ids_raw, dtype=np.int64).reshape(-1)
        scores = np.asarray(scores_raw, dtype=np.float64).reshape(-1)
        if ids.shape != scores.shape:
            raise ValueError(f"{name}: {ids.size} ids but {scores.size} scores")
        keep = ids >= 0
        ids, scores = ids[keep], scores[keep]
        best: dict[int, float] = {}
        for d, s in zip(ids.tolist(), scores.tolist(), strict=True):
            if d not in best or s > best[d]:
                best[d] = s
        docs = list(best)
        norm = normalize(np.array([best[d] for d in docs], dtype=np.float64), method)
        per_retriever[name] = (dict(zip(docs, norm.tolist(), strict=True)), _floor(norm, method))
        union.update(docs)
    fused: dict[int, float] = {}
    for d in union:
        acc = 0.0
        for name, (normed, floor) in per_retriever.items():
            acc += present[name] / total * normed.get(d, floor)
        fused[d] = acc
    return _sorted(fused)
