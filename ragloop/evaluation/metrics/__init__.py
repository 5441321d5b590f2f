"""Evaluation metrics. `retrieval`: ranking metrics over document ids (recall, precision,
MRR, nDCG, average precision)."""

from ragloop.evaluation.metrics.retrieval import (
    average_precision,
    dedupe,
    hit_at_k,
    mean,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)

__all__ = [
    "average_precision",
    "dedupe",
    "hit_at_k",
    "mean",
    "ndcg_at_k",
    "precision_at_k",
    "recall_at_k",
    "reciprocal_rank",
]
