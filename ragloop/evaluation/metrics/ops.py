"""Operations metrics of one result record: latency, tokens, cost, cache hits.

`ops_metrics` gives per-item `(numerator, denominator)` pairs (means and rates, aggregated like
every other metric); `ops_values` gives the raw values whose *distribution* is reported
(p50/p95 of end-to-end latency and of each node's latency).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragloop.agent.trace import Trace

Pair = tuple[float, float]


def ops_metrics(rec: Mapping[str, Any]) -> dict[str, Pair]:
    trace = Trace.from_json(rec.get("trace")).records
    return {
        "tokens_per_query": (float(sum(r.tokens for r in trace)), 1.0),
        "cost_per_query": (float(sum(r.cost for r in trace)), 1.0),
        # share of trace records (node executions) whose model output came from a cache
        "cache_hit_rate": (float(sum(1 for r in trace if r.cached)), float(len(trace))),
        "latency_ms_mean": (float(rec.get("latency_ms") or 0.0), 1.0),
    }


def ops_values(rec: Mapping[str, Any]) -> dict[str, list[float]]:
    """End-to-end latency of the final turn (ms), the whole conversation's latency when earlier
    turns were fed first, and every trace record's latency by node (`node_ms:<node>`)."""
    out: dict[str, list[float]] = {
        "latency_ms": [float(rec.get("latency_ms") or 0.0)],
        "conversation_ms": [float(rec.get("latency_ms") or 0.0) + float(rec.get("history_latency_ms") or 0.0)],
    }
    for r in Trace.from_json(rec.get("trace")).records:
        out.setdefault(f"node_ms:{r.node}", []).append(r.latency_ms)
    return out
