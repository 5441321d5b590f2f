"""The trace of one turn: every node's decision, inputs that matter, scores, latency, tokens.

It is what the CLI shows, what the evaluation harness scores and what the service stores. Each
record's `detail` is typed by its node (`ragloop.agent.details`); `details(Kind)` is how a consumer
reads them, so mypy sees every attribute it reads.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ragloop.agent.details import NodeDetail
from ragloop.agent.types import TraceRecord

D = TypeVar("D", bound=NodeDetail)


class TraceSummary(BaseModel):
    """Counts over one trace: what `Answer.to_json` shows and the answers table stores."""

    model_config = ConfigDict(frozen=True)

    steps: int
    rewrites: int
    retrievals: int
    generations: int
    critique_cycles: int
    external_searches: int
    verdicts: list[str]
    termination_reason: str
    latency_ms: float
    tokens: int
    cost: float
    path: list[str]


class Trace(BaseModel):
    model_config = ConfigDict(frozen=True)

    records: list[TraceRecord] = Field(default_factory=list)
    termination_reason: str = ""

    def to_json(self) -> list[dict[str, Any]]:
        """The stored form: a list of records (node, decision, detail, latency_ms, ...)."""
        return [r.model_dump(mode="json") for r in self.records]

    @classmethod
    def from_json(cls, data: list[dict[str, Any]] | None, termination_reason: str = "") -> Trace:
        """Tolerant of rows written by earlier versions (see `ragloop.agent.details`)."""
        return cls(
            records=[TraceRecord.model_validate(d) for d in data or [] if isinstance(d, dict)],
            termination_reason=termination_reason,
        )

    def nodes(self) -> list[str]:
        return [r.node for r in self.records]

    def of(self, node: str) -> list[TraceRecord]:
        return [r for r in self.records if r.node == node]

    def details(self, kind: type[D]) -> list[D]:
        """The details of one kind, in order (e.g. `details(RetrieveDetail)`)."""
        return [r.detail for r in self.records if isinstance(r.detail, kind)]

    def first(self, kind: type[D]) -> D | None:
        found = self.details(kind)
        return found[0] if found else None

    def summarize(self) -> TraceSummary:
        counts = Counter(self.nodes())
        return TraceSummary(
            steps=len(self.records),
            rewrites=counts.get("rewrite", 0),
            retrievals=counts.get("retrieve", 0),
            generations=counts.get("generate", 0),
            critique_cycles=counts.get("critique", 0),
            external_searches=counts.get("external_search", 0),
            verdicts=[r.decision for r in self.records if r.node == "grade"],
            termination_reason=self.termination_reason,
            latency_ms=round(sum(r.latency_ms for r in self.records), 1),
            tokens=sum(r.tokens for r in self.records),
            cost=round(sum(r.cost for r in self.records), 6),
            path=self.nodes(),
        )

    def summary(self) -> dict[str, Any]:
        """The summary's stored (JSON) form."""
        return self.summarize().model_dump(mode="json")
