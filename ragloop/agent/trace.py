"""The trace of one turn: every node's decision, inputs that matter, scores, latency, tokens.

It is what the CLI shows, what the evaluation harness scores and what the service stores.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ragloop.agent.types import TraceRecord


@dataclass
class Trace:
    records: list[TraceRecord]
    termination_reason: str = ""
    _summary: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_json(self) -> list[dict[str, Any]]:
        return [r.model_dump(mode="json") for r in self.records]

    @classmethod
    def from_json(cls, data: list[dict[str, Any]], termination_reason: str = "") -> Trace:
        return cls([TraceRecord.model_validate(d) for d in data], termination_reason)

    def nodes(self) -> list[str]:
        return [r.node for r in self.records]

    def summary(self) -> dict[str, Any]:
        counts = Counter(self.nodes())
        return {
            "steps": len(self.records),
            "rewrites": counts.get("rewrite", 0),
            "retrievals": counts.get("retrieve", 0),
            "generations": counts.get("generate", 0),
            "critique_cycles": counts.get("critique", 0),
            "external_searches": counts.get("external_search", 0),
            "verdicts": [r.decision for r in self.records if r.node == "grade"],
            "termination_reason": self.termination_reason,
            "latency_ms": round(sum(r.latency_ms for r in self.records), 1),
            "tokens": sum(r.tokens for r in self.records),
            "cost": round(sum(r.cost for r in self.records), 6),
            "path": self.nodes(),
        }
