"""The harness's result record of one item, typed: what a run stores and what the metrics read.

A run stores one JSON line per item (`runner.py`: the item's fields, then the answer's part built
here by `agent_record` from the typed `Answer`, then judgements). The metrics, failure analysis
and charts read it back as a `ResultRecord`, by attribute: a field renamed here fails mypy at every
reader instead of silently zeroing a metric. The trace is the agent's typed trace.

Loading is tolerant, because run files written by earlier versions are reported on: unknown keys
are ignored, null or missing ones take their defaults, and a field that no longer fits its type
is dropped (taking its default) rather than failing the whole report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ragloop.agent.answer import Answer
from ragloop.agent.trace import Trace
from ragloop.agent.types import TraceRecord
from ragloop.config import PipelineConfig


class _Rec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _nulls_take_defaults(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            return {k: v for k, v in data.items() if v is not None}
        return data


class ChunkSeen(_Rec):
    """A chunk the turn saw: its passage id (the dataset's), grade and retrieval score."""

    doc_id: str = ""
    passage: str = ""
    grade: float | None = None
    score: float = 0.0
    source: str = "internal"
    excerpt: str = ""


class CitationSeen(_Rec):
    n: int = 0
    chunk_id: str = ""
    passage: str = ""
    score: float = 0.0


class KeptText(_Rec):
    chunk_id: str = ""
    text: str = ""
    score: float = 0.0


class DeficiencySeen(_Rec):
    id: str = ""
    type: str = ""
    status: str = "open"
    severity: float = 0.0
    description: str = ""
    attempts: int = 0


class CycleSeen(_Rec):
    cycle: int = 0
    found: list[str] = Field(default_factory=list)
    resolved: list[str] = Field(default_factory=list)
    score: float = 0.0


class Budgets(_Rec):
    """The knobs the agent metrics are defined against."""

    tau_lower: float = 0.3
    tau_upper: float = 0.7
    max_rewrites: int = 2
    rewrite: bool = True
    k: int = 5


class AnswerPart(_Rec):
    """The answer's part of a record (`agent_record`)."""

    mode: str = ""
    """"agent" or "retrieval" (ranking-only suites); empty on an item that failed before answering."""
    standalone: str = ""
    answer: str = ""
    refused: bool = False
    termination_reason: str = ""
    verdict: str | None = None
    quality_score: float = 0.0
    residual_deficiencies: list[str] = Field(default_factory=list)
    citations: list[CitationSeen] = Field(default_factory=list)
    chunks: dict[str, ChunkSeen] = Field(default_factory=dict)
    """Every chunk seen, by chunk id, in first-sighting order."""
    kept: list[KeptText] = Field(default_factory=list)
    deficiencies: list[DeficiencySeen] = Field(default_factory=list)
    cycles: list[CycleSeen] = Field(default_factory=list)
    trace: list[TraceRecord] = Field(default_factory=list)
    latency_ms: float = 0.0
    budgets: Budgets = Field(default_factory=Budgets)


class ResultRecord(AnswerPart):
    """One stored result line: the item, its answer part, the run's additions."""

    id: str = ""
    suite: str = ""
    kind: str = "answerable"
    should_refuse: bool = False
    question: str = ""
    gold_docs: list[str] = Field(default_factory=list)
    gold_chunks: list[str] = Field(default_factory=list)
    answers: list[str] = Field(default_factory=list)
    """Gold answer spans (SQuAD)."""
    reference: str = ""
    ranking: list[str] = Field(default_factory=list)
    """Retrieval-only records: the passages in rank order."""
    history: list[str] = Field(default_factory=list)
    """The conversation's earlier user turns (the item is a follow-up when there are any)."""
    history_latency_ms: float = 0.0
    judged: dict[str, float | None] = Field(default_factory=dict)
    judge_spread: dict[str, float] = Field(default_factory=dict)
    """Max - min of each judged metric over the repeats (present with judge_repeats > 1)."""
    error: str | None = None

    @classmethod
    def load(cls, rec: Mapping[str, Any] | ResultRecord) -> ResultRecord:
        if isinstance(rec, ResultRecord):
            return rec
        data = dict(rec)
        for _ in range(len(cls.model_fields)):
            try:
                return cls.model_validate(data)
            except ValidationError as exc:  # an unfit field takes its default; the rest still counts
                bad = {e["loc"][0] for e in exc.errors() if e["loc"]}
                if not bad & set(data):
                    raise
                data = {k: v for k, v in data.items() if k not in bad}
        return cls.model_validate(data)

    @property
    def typed_trace(self) -> Trace:
        return Trace(records=self.trace, termination_reason=self.termination_reason)


def passage(doc_id: str, prefix: str) -> str:
    """The dataset's passage id of a document (the collection's doc id without the suite's prefix)."""
    if prefix and doc_id.startswith(prefix):
        return doc_id[len(prefix) :]
    return doc_id


def agent_record(ans: Answer, prefix: str, cfg: PipelineConfig) -> dict[str, Any]:
    """The record's answer part (the runner adds the item, the conversation history and judgements)."""
    part = AnswerPart(
        mode="agent",
        standalone=ans.standalone_question,
        answer=ans.answer,
        refused=ans.refused,
        termination_reason=ans.termination_reason,
        verdict=ans.verdict,
        quality_score=ans.quality_score,
        residual_deficiencies=ans.residual_deficiencies,
        citations=[
            CitationSeen(n=c.n, chunk_id=c.chunk_id, passage=passage(c.doc_id, prefix), score=round(c.score, 4))
            for c in ans.citations
        ],
        chunks={
            c.chunk_id: ChunkSeen(
                doc_id=c.doc_id,
                passage=passage(c.doc_id, prefix),
                grade=None if c.grade is None else round(float(c.grade), 4),
                score=round(float(c.retrieval_score), 4),
                source=c.source,
                excerpt=c.text[:240],
            )
            for c in ans.hits
        },
        kept=[KeptText(chunk_id=s.chunk_id, text=s.text, score=round(float(s.score), 4)) for s in ans.kept],
        deficiencies=[
            DeficiencySeen(
                id=d.id,
                type=str(d.type),
                status=d.status,
                severity=d.severity,
                description=d.description[:300],
                attempts=d.attempts,
            )
            for d in ans.deficiencies
        ],
        cycles=[CycleSeen(cycle=h.cycle, found=h.found, resolved=h.resolved, score=h.score) for h in ans.cycles],
        trace=list(ans.trace.records),
        latency_ms=round(ans.latency_ms, 3),
        budgets=Budgets(
            tau_lower=cfg.agent.tau_lower,
            tau_upper=cfg.agent.tau_upper,
            max_rewrites=cfg.agent.budgets.max_rewrites,
            rewrite=cfg.agent.rewrite,
            k=cfg.retrieval.k,
        ),
    )
    return part.model_dump(mode="json")
