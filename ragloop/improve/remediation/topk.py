"""The top-k refit of the ranking buffer: how many chunks retrieval should hand on.

A ranking failure is an oracle chunk ranked below k. When the buffered failures' oracle chunks sit
just below k (ranks k+1..2k), no weighting of the scores fixes that as surely as a larger k does.
For each buffered query, `hit(k')` says whether one of its oracle chunks ranks within k' under the
retrieval config the refit chose; the fitted k is the smallest k' in `K_GRID` beyond which one
more chunk recovers less than `min_marginal` (2%) of the buffered queries (the knee of the hit
curve), never below the serving k and at most `K_MAX`. A candidate is registered only when the
bootstrap interval of the per-query gain (hit at the fitted k minus hit at the serving k) lies above
zero. Larger k costs context and latency, so the marginal rule keeps it at the knee, and the
experiment then decides on live traffic whether the served answers got better.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from ragloop.config.pipeline import RetrievalConfig
from ragloop.evaluation.stats import ONE_SIDED, bootstrap_ci, sign_flip_gain_p
from ragloop.improve.remediation.ranking import RankingTuple, RankOf

K_GRID = (2, 3, 4, 5, 6, 8, 10)
K_MAX = 10
MIN_MARGINAL = 0.02


@dataclass(frozen=True)
class TopKFit:
    current: int
    fitted: int
    hit_current: float
    hit_fitted: float
    gain: float
    lo: float
    hi: float
    queries: int
    curve: dict[int, float]
    p: float
    """One-sided p of the gain (`stats.sign_flip_gain_p`; for these 0/1 hits the exact sign test)."""

    @property
    def improves(self) -> bool:
        return self.queries > 1 and self.fitted != self.current and self.lo > 0.0 and self.p <= ONE_SIDED

    def to_json(self) -> dict[str, Any]:
        return {
            "current": self.current,
            "fitted": self.fitted,
            "hit_current": round(self.hit_current, 6),
            "hit_fitted": round(self.hit_fitted, 6),
            "gain": {
                "value": round(self.gain, 6),
                "lo": round(self.lo, 6),
                "hi": round(self.hi, 6),
                "p": round(self.p, 6),
            },
            "queries": self.queries,
            "curve": {str(k): round(v, 6) for k, v in self.curve.items()},
            "improves": self.improves,
            "p_level": ONE_SIDED,
        }


def fit_top_k(
    tuples: Sequence[RankingTuple],
    config: RetrievalConfig,
    rr_of: RankOf,
    *,
    min_marginal: float = MIN_MARGINAL,
    resamples: int = 1000,
    seed: int = 20240601,
) -> TopKFit:
    """`config`: the retrieval the candidate will serve (the serving one, or the refitted fusion)."""
    by_query: dict[str, list[str]] = defaultdict(list)
    for t in tuples:
        if t.chunk_id not in by_query[t.query]:
            by_query[t.query].append(t.chunk_id)
    queries = sorted(by_query)
    best_rr = np.array([max(rr_of(config, q, by_query[q]), default=0.0) for q in queries], dtype=np.float64)
    current = config.k
    grid = sorted({current, *(k for k in K_GRID if current <= k <= K_MAX)})

    def hits(k: int) -> np.ndarray:
        return (best_rr >= 1.0 / k - 1e-12).astype(np.float64) if len(best_rr) else np.zeros(0)

    curve = {k: float(hits(k).mean()) if len(best_rr) else 0.0 for k in grid}
    fitted = current
    for a, b in pairwise(grid):
        if (curve[b] - curve[a]) / (b - a) < min_marginal:
            break
        fitted = b
    diff = (hits(fitted) - hits(current)).tolist()
    est = bootstrap_ci(diff, resamples=resamples, seed=seed) if diff else None
    return TopKFit(
        current=current,
        fitted=fitted,
        hit_current=curve[current],
        hit_fitted=curve[fitted],
        gain=est.value if est else 0.0,
        lo=est.lo if est else 0.0,
        hi=est.hi if est else 0.0,
        queries=len(queries),
        curve=curve,
        p=sign_flip_gain_p([0.0] * len(diff), diff, seed=seed) if diff else 1.0,
    )
