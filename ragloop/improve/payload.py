"""The stored forms of a served answer, typed: the evaluation job's payload and the trace column.

The recorder writes them from the typed `Answer` when it stores the answer; tier 1, the tier-2
judge, diagnosis and the threshold refit read them back from the store. Both sides go through
these models, so a field renamed on one side fails mypy instead of silently reading a default.

The JSON shape is the one the previous version stored (the same keys), and loading is tolerant:
the store holds rows written by that version and by future ones (unknown keys ignored, missing
keys take their defaults, list items that are not objects dropped). A tier-2 job queued by
feedback before tier 1 ran carries only `reasons`: its `answer` is None (`carries_answer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragloop.agent.answer import Answer
from ragloop.agent.details import CondenseDetail, GradeDetail, RetrieveDetail
from ragloop.agent.trace import Trace, TraceSummary
from ragloop.agent.types import TraceRecord
from ragloop.improve.judge import JudgeInput
from ragloop.improve.tier1 import Tier1Input
from ragloop.store import Store
from ragloop.store.vocabulary import Tier

MAX_CONTEXT_CHARS = 2000
MAX_RETRIEVED = 10


class _Stored(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


def _objects(v: Any) -> Any:
    """Stored lists keep only their objects (rows hand-edited or written by a broken version)."""
    return [x for x in v if isinstance(x, Mapping | BaseModel)] if isinstance(v, list | tuple) else v


class PayloadCitation(_Stored):
    n: int
    chunk_id: str
    doc_id: str = ""


class PayloadSource(_Stored):
    """The text the answer was generated from, per chunk (refinement's kept strips, joined)."""

    chunk_id: str
    text: str = ""


class PayloadHit(_Stored):
    chunk_id: str
    doc_id: str = ""
    score: float = 0.0
    text: str = ""
    rank: int = 0
    """Retrieval rank (1-based); 0 in rows stored before ranks were: use the list position."""
    stage_scores: dict[str, float] = Field(default_factory=dict)
    stage_ranks: dict[str, int] = Field(default_factory=dict)


class EvaluationPayload(_Stored):
    """What the evaluation tiers need, copied into the job so a worker never needs the index."""

    question: str = ""
    standalone_question: str = ""
    answer: str | None = None
    refused: bool = False
    termination_reason: str = ""
    citations: list[PayloadCitation] = Field(default_factory=list)
    sources: list[PayloadSource] = Field(default_factory=list)
    retrieved: list[PayloadHit] = Field(default_factory=list)
    """Internal hits, best retrieval score first, at most `MAX_RETRIEVED`."""
    retrieval_scores: list[float] = Field(default_factory=list)
    pipeline_version: str = ""
    collection: str | None = None
    # added when tier 1 (or feedback) queues the judge
    reasons: list[str] = Field(default_factory=list)
    reference: str | None = None
    heuristic_score: float | None = None
    traceparent: str = ""
    """The W3C trace context of the request that stored the answer ("" when tracing is off): the
    job's span links to it (`ragloop.tracing`)."""

    _lists = field_validator("citations", "sources", "retrieved", mode="before")(_objects)

    @classmethod
    def from_answer(cls, question: str, ans: Answer) -> EvaluationPayload:
        hits = ans.internal_hits()[:MAX_RETRIEVED]
        return cls(
            question=question,
            standalone_question=ans.standalone_question,
            answer=ans.answer,
            refused=ans.refused,
            termination_reason=ans.termination_reason,
            citations=[PayloadCitation(n=c.n, chunk_id=c.chunk_id, doc_id=c.doc_id) for c in ans.citations],
            sources=[PayloadSource(chunk_id=cid, text=text[:MAX_CONTEXT_CHARS]) for cid, text in ans.sources()],
            retrieved=[
                PayloadHit(
                    chunk_id=c.chunk_id,
                    doc_id=c.doc_id,
                    score=round(float(c.retrieval_score), 6),
                    text=c.text[:MAX_CONTEXT_CHARS],
                    rank=c.rank,
                    stage_scores={k: round(float(v), 6) for k, v in c.stage_scores.items()},
                    stage_ranks=dict(c.stage_ranks),
                )
                for c in hits
            ],
            retrieval_scores=[round(float(c.retrieval_score), 6) for c in hits],
            pipeline_version=ans.pipeline_version,
        )

    @classmethod
    def load(cls, data: Mapping[str, Any] | None) -> EvaluationPayload:
        return cls.model_validate(dict(data or {}))

    @property
    def carries_answer(self) -> bool:
        """False for a judge job queued by feedback before tier 1 stored the answer's payload."""
        return self.answer is not None

    def contexts(self) -> list[str]:
        """The generator's context: its sources, else the retrieved texts."""
        if self.sources:
            return [s.text for s in self.sources]
        return [r.text for r in self.retrieved]

    def tier1_input(self) -> Tier1Input:
        """Tier 1's feature-extraction input."""
        return Tier1Input(
            question=self.question,
            answer=self.answer or "",
            contexts=self.contexts(),
            retrieval_scores=list(self.retrieval_scores),
            refused=self.refused,
        )

    def judge_input(self) -> JudgeInput:
        """The tier-2 judge's input."""
        return JudgeInput(
            question=self.question,
            answer=self.answer or "",
            contexts=self.contexts(),
            refused=self.refused,
            reference=self.reference or None,
        )

    def stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def answer_payload(store: Store, answer_id: str) -> EvaluationPayload | None:
    """The payload the recorder stored with the answer's tier-1 job; None when there is none."""
    for job in store.queue.for_answer(answer_id):
        if job.tier == Tier.HEURISTIC:
            p = EvaluationPayload.load(job.payload)
            if p.carries_answer:
                return p
    return None


class StoredTrace(_Stored):
    """The answers table's `trace` column."""

    records: list[TraceRecord] = Field(default_factory=list)
    summary: TraceSummary | None = None
    degraded: bool = False
    """Served by the last known-good pipeline because the active one failed."""

    _records = field_validator("records", mode="before")(_objects)

    @field_validator("summary", mode="before")
    @classmethod
    def _tolerant_summary(cls, v: Any) -> Any:
        """A summary written by another version is dropped, not fatal: it is derived from the records."""
        try:
            return TraceSummary.model_validate(v) if v is not None else None
        except ValueError:
            return None

    @classmethod
    def of(cls, ans: Answer, degraded: bool) -> StoredTrace:
        return cls(records=list(ans.trace.records), summary=ans.trace.summarize(), degraded=degraded)

    @classmethod
    def load(cls, data: Mapping[str, Any] | None) -> StoredTrace:
        return cls.model_validate(dict(data or {}))

    @property
    def trace(self) -> Trace:
        return Trace(records=self.records, termination_reason=self.summary.termination_reason if self.summary else "")

    def first_query(self) -> str | None:
        """The first retrieval's query: what the retriever was asked."""
        first = self.trace.first(RetrieveDetail)
        return first.queries[0] if first and first.queries and first.queries[0].strip() else None

    def standalone(self) -> str | None:
        """The condensed question the turn answered (what the answer check read it against)."""
        first = self.trace.first(CondenseDetail)
        return first.standalone if first and first.standalone.strip() else None

    def first_gate_score(self) -> float | None:
        """The best grade of the first grade step: what τL was compared to."""
        first = self.trace.first(GradeDetail)
        return None if first is None else max(first.scores.values(), default=0.0)

    def stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
