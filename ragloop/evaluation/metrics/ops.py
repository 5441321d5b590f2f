"""Operations metrics of one result record: latency, tokens, cost, cache hits.

`ops_metrics` gives per-item `(numerator, denominator)` pairs (means and rates, aggregated like
every other metric); `ops_values` gives the raw values whose *distribution* is reported
(p50/p95 of end-to-end latency and of each node's latency).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragloop.evaluation.records import ResultRecord

Pair = tuple[float, float]


def ops_metrics(rec: Mapping[str, Any] | ResultRecord) -> dict[str, Pair]:
    r = ResultRecord.load(rec)
    trace = r.trace
    return {
        "tokens_per_query": (float(sum(r.tokens for r in trace)), 1.0),
        "cost_per_query": (float(sum(r.cost for r in trace)), 1.0),
        # share of trace records (node executions) whose model output came from a cache
        "cache_hit_rate": (float(sum(1 for r in trace if r.cached)), float(len(trace))),
        "latency_ms_mean": (r.latency_ms, 1.0),
    }


def ops_values(rec: Mapping[str, Any] | ResultRecord) -> dict[str, list[float]]:
    """End-to-end latency of the final turn (ms), the whole conversation's latency when earlier
    turns were fed first, and every trace record's latency by node (`node_ms:<node>`)."""
    r = ResultRecord.load(rec)
    out: dict[str, list[float]] = {
        "latency_ms": [r.latency_ms],
        "conversation_ms": [r.latency_ms + r.history_latency_ms],
    }
    for step in r.trace:
        out.setdefault(f"node_ms:{step.node}", []).append(step.latency_ms)
    return out
