"""The agent's result: one typed, frozen object that every consumer reads by attribute.

The recorder, the evaluation-job payload, the harness runner and metrics, diagnosis and the API
used to read the graph's state dict (`state["retrieved"]`, `state["kept"]`, ...) and the trace's
details by string keys, so renaming a key silently zeroed a metric. They read this instead: a
renamed field fails mypy. The graph's raw final state is kept only as `graph_state`, for tests of
the graph's internals (summary, budgets, drafts); `tests/agent/test_typed_answer.py` fails if code
under `ragloop/` reads it.
"""

from __future__ import annotations

import time
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ragloop.agent.trace import Trace
from ragloop.agent.types import (
    REFUSAL_REASONS,
    Citation,
    CycleRecord,
    Deficiency,
    KeptStrip,
    RetrievedChunk,
    TerminationReason,
    Verdict,
)


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True)

    question: str
    answer: str
    citations: list[Citation]
    refused: bool
    termination_reason: TerminationReason
    residual_deficiencies: list[str]
    quality_score: float
    trace: Trace
    standalone_question: str = ""
    verdict: Verdict | None = None
    """The latest CRAG verdict of the turn."""
    thread_id: str | None = None
    pipeline_version: str = ""
    latency_ms: float = 0.0
    hits: list[RetrievedChunk] = Field(default_factory=list)
    """Every chunk the turn saw, first sighting order (retrievals and external search), with its
    retrieval rank, per-stage scores and ranks, and its grade when graded."""
    kept: list[KeptStrip] = Field(default_factory=list)
    """The strips the answer was generated from (refinement's output), with provenance."""
    deficiencies: list[Deficiency] = Field(default_factory=list)
    cycles: list[CycleRecord] = Field(default_factory=list)
    steps: int = 0
    model_calls: int = 0

    _graph_state: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def graph_state(self) -> dict[str, Any]:
        """The graph's final state, for tests of the graph's internals only; consumers read fields."""
        return self._graph_state

    def internal_hits(self) -> list[RetrievedChunk]:
        """Knowledge-base hits (no external results), best retrieval score first."""
        internal = [c for c in self.hits if c.source == "internal"]
        return sorted(internal, key=lambda c: -float(c.retrieval_score))

    def sources(self) -> list[tuple[str, str]]:
        """(chunk id, text) of the passages the answer was generated from: its kept strips joined per
        chunk, in order of first appearance (what the recorder stores as the evaluation's sources and
        diagnosis reads as contexts)."""
        texts: dict[str, list[str]] = {}
        for s in self.kept:
            texts.setdefault(s.chunk_id, []).append(s.text)
        return [(cid, " ".join(t)) for cid, t in texts.items()]

    def with_version(self, version: str) -> Answer:
        """The same answer attributed to the pipeline version that served it."""
        return self.model_copy(update={"pipeline_version": version})

    def to_json(self, with_trace: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "question": self.question,
            "standalone_question": self.standalone_question,
            "answer": self.answer,
            "citations": [c.model_dump() for c in self.citations],
            "refused": self.refused,
            "termination_reason": self.termination_reason,
            "residual_deficiencies": self.residual_deficiencies,
            "quality_score": self.quality_score,
            "verdict": self.verdict,
            "thread_id": self.thread_id,
            "pipeline_version": self.pipeline_version,
            "latency_ms": round(self.latency_ms, 1),
            "trace_summary": self.trace.summary(),
        }
        if with_trace:
            out["trace"] = self.trace.to_json()
        return out


class NodeEvent(BaseModel):
    """One graph step as it happens (what the service streams as an SSE `node` event)."""

    model_config = ConfigDict(frozen=True)

    node: str
    decision: str
    latency_ms: float


class AnswerEvent(BaseModel):
    """The turn's end: the validated answer, the only event with text a user should see."""

    model_config = ConfigDict(frozen=True)

    answer: Answer


AgentEvent = NodeEvent | AnswerEvent


def answer_from_state(state: dict[str, Any], question: str, thread_id: str | None, version: str, t0: float) -> Answer:
    """The typed answer of a finished (or cut-short) turn; the only place that reads the state dict."""
    reason = cast(TerminationReason, state.get("termination_reason") or "recursion_limit")
    ans = Answer(
        question=question,
        answer=state.get("final_answer") or "",
        citations=list(state.get("citations") or []),
        refused=bool(state.get("refused")) or reason in REFUSAL_REASONS,
        termination_reason=reason,
        residual_deficiencies=list(state.get("residual_deficiencies") or []),
        quality_score=float(state.get("quality_score") or 0.0),
        trace=Trace(records=list(state.get("trace") or []), termination_reason=reason),
        standalone_question=state.get("standalone") or question,
        verdict=state.get("verdict"),
        thread_id=thread_id,
        pipeline_version=version,
        latency_ms=(time.perf_counter() - t0) * 1000,
        hits=list(state.get("retrieved") or []),
        kept=list(state.get("kept") or []),
        deficiencies=list(state.get("deficiencies") or []),
        cycles=list(state.get("history") or []),
        steps=int(state.get("steps") or 0),
        model_calls=int(state.get("model_calls") or 0),
    )
    ans._graph_state = state
    return ans
