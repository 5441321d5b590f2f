"""Maximal marginal relevance: trade a little relevance for not showing the same passage twice.

Overlapping chunks and copied boilerplate make near-duplicates common in the top-k; each one
wastes a slot of the answer context. MMR picks greedily by

    lambda * relevance(d) - (1 - lambda) * max_{s in selected} cos(d, s)

Relevance usually comes from fusion (BM25 or RRF scale, not cosine), so it is min-max scaled
to [0, 1] first; otherwise lambda would mean something different for every score scale.
"""

from __future__ import annotations

import numpy as np


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def mmr(
    query_vec: np.ndarray,
    cand_vecs: np.ndarray,
    relevance: np.ndarray | None,
    k: int,
    lambda_: float,
) -> list[int]:
    """Positions into `cand_vecs`, in selection order; at most k.

    With `relevance=None` the relevance is cos(query, candidate), the textbook form; otherwise
    `query_vec` is only checked for shape. Ties go to the lower position (np.argmax keeps the
    first maximum), so lambda=1 reproduces the relevance order exactly.
    """
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"lambda must be within [0, 1], got {lambda_}")
    cands = np.asarray(cand_vecs, dtype=np.float64)
    if cands.ndim != 2:
        raise ValueError(f"expected candidate vectors of shape [n, d], got {list(cands.shape)}")
    n, dim = cands.shape
    q = np.asarray(query_vec, dtype=np.float64).reshape(-1)
    if q.shape[0] != dim:
        raise ValueError(f"query has dimension {q.shape[0]}, candidates have {dim}")
    if not (np.isfinite(cands).all() and np.isfinite(q).all()):
        raise ValueError("query or candidate vectors contain NaN or infinity")
    units = _unit_rows(cands)
    if relevance is None:
        rel = units @ _unit_rows(q)
    else:
        rel = np.asarray(relevance, dtype=np.float64).reshape(-1)
        if rel.shape[0] != n:
            raise ValueError(f"{rel.shape[0]} relevance scores for {n} candidates")
        if not np.isfinite(rel).all():
            raise ValueError("relevance contains NaN or infinity")
    if n == 0 or k <= 0:
        return []
    lo, hi = rel.min(), rel.max()
    rel = np.ones(n) if hi - lo <= 0 else (rel - lo) / (hi - lo)

    sims = units @ units.T
    available = np.ones(n, dtype=bool)
    max_sim = np.zeros(n)  # redundancy is 0 until something is selected
    selected: list[int] = []
    for _ in range(min(k, n)):
        score = lambda_ * rel - (1.0 - lambda_) * max_sim
        score[~available] = -np.inf
        pick = int(np.argmax(score))
        selected.append(pick)
        available[pick] = False
        max_sim = sims[:, pick] if len(selected) == 1 else np.maximum(max_sim, sims[:, pick])
    return selected
