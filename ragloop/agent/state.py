"""The graph state: typed channels with reducers.

Conversation channels (messages, summary) persist across turns in the checkpointer; every
per-turn channel is reset by the turn's input (`turn_input`). Append/merge channels accept the
`RESET` marker, so a new turn starts clean without a special node.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

from ragloop.agent.types import Citation, CycleRecord, Deficiency, KeptStrip, RetrievedChunk, TraceRecord

RESET = "__reset__"


def append_or_reset(existing: list[Any] | None, new: list[Any] | str | None) -> list[Any]:
    if new == RESET:
        return []
    return [*(existing or []), *(new or [])]


def merge_deficiencies(existing: list[Deficiency] | None, new: list[Deficiency] | str | None) -> list[Deficiency]:
    """Update by stable id, append unseen ones; order of first appearance is kept."""
    if isinstance(new, str):
        return []
    merged = {d.id: d for d in existing or []}
    for d in new or []:
        merged[d.id] = d
    return list(merged.values())


def merge_chunks(existing: list[RetrievedChunk] | None, new: list[RetrievedChunk] | str | None) -> list[RetrievedChunk]:
    """Context grows across targeted retrievals; a chunk seen again keeps its first record
    unless the new one carries a grade."""
    if isinstance(new, str):
        return []
    merged = {c.chunk_id: c for c in existing or []}
    for c in new or []:
        if c.chunk_id not in merged or c.grade is not None:
            merged[c.chunk_id] = c
    return list(merged.values())


class AgentState(TypedDict, total=False):
    # conversation (persists across turns)
    messages: Annotated[list[AnyMessage], add_messages]
    summary: str
    session_id: str
    user_id: str
    # the question
    question: str
    standalone: str
    queries: Annotated[list[str], append_or_reset]
    rewrites: int
    # retrieval and grading
    retrieved: Annotated[list[RetrievedChunk], merge_chunks]
    last_batch: list[str]  # chunk ids of the latest retrieval, to tell "same set again"
    verdict: str | None
    verdict_reason: str
    kept: list[KeptStrip]
    external_tried: bool
    external_note: str
    # generation and validation (pending is never shown until validated)
    pending_answer: str | None
    pending_citations: list[Citation]
    corrections: list[str]
    citation_retries: int
    unsupported: list[str]  # sentence keys the validator rejected this turn
    validation: str  # ok | retry | gate | exhausted | fallback
    extractive: bool  # the chat model's drafts failed validation: compose from the strips instead
    validated_answer: str | None  # the latest draft that passed validation: what a turn may end with
    validated_citations: list[Citation]
    # critique loop
    cycle: int
    deficiencies: Annotated[list[Deficiency], merge_deficiencies]
    history: Annotated[list[CycleRecord], append_or_reset]
    last_score: float
    plateau_streak: int
    termination_reason: str | None
    # outcome
    final_answer: str | None
    citations: list[Citation]
    quality_score: float
    residual_deficiencies: list[str]
    refused: bool
    # budgets and trace
    steps: int
    model_calls: int
    started_at: float
    trace: Annotated[list[TraceRecord], append_or_reset]


def turn_input(question: str, session_id: str = "", user_id: str = "") -> dict[str, Any]:
    """Everything a new turn starts from: the question appended to the conversation, every
    per-turn channel back to empty."""
    from langchain_core.messages import HumanMessage

    return {
        "messages": [HumanMessage(content=question)],
        "session_id": session_id,
        "user_id": user_id,
        "question": question,
        "standalone": question,
        "queries": RESET,
        "rewrites": 0,
        "retrieved": RESET,
        "last_batch": [],
        "verdict": None,
        "verdict_reason": "",
        "kept": [],
        "external_tried": False,
        "external_note": "",
        "pending_answer": None,
        "pending_citations": [],
        "corrections": [],
        "citation_retries": 0,
        "unsupported": [],
        "validation": "",
        "extractive": False,
        "validated_answer": None,
        "validated_citations": [],
        "cycle": 0,
        "deficiencies": RESET,
        "history": RESET,
        "last_score": 0.0,
        "plateau_streak": 0,
        "termination_reason": None,
        "final_answer": None,
        "citations": [],
        "quality_score": 0.0,
        "residual_deficiencies": [],
        "refused": False,
        "steps": 0,
        "model_calls": 0,
        "started_at": time.time(),
        "trace": RESET,
    }
