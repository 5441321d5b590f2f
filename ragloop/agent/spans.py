"""Span attributes of the answer graph, derived from its trace: a node span carries exactly what its
`TraceRecord` says (node, decision, latency, tokens, cost, and its typed detail), the graph span
what the `TraceSummary` of the turn says. No second source of truth: a field added to a detail
model shows up in the node's span without a change here.

A detail field becomes attributes by its type: numbers and flags as they are; strings and lists of
strings as lengths and counts (they hold the question's words: a rewrite, a grade's reason, a
claim), with the text only when content capture is allowed (`ragloop.tracing.capture_content`);
the fields that hold ids or labels (`IDS`, `LABELS`) as they are; a dict of scores as its values
(keyed by chunk id: with its keys); a list of tuples as its count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ragloop import tracing
from ragloop.agent.trace import TraceSummary
from ragloop.agent.types import TraceRecord
from ragloop.tracing import Attributes

if TYPE_CHECKING:
    from ragloop.agent.answer import Answer

LABELS = frozenset({"scorer", "purpose", "how", "verdict", "termination_reason"})
"""String fields that hold a fixed vocabulary or a component's name, never user text."""
IDS = frozenset({"chunk_ids", "kept", "sources", "citations", "resolved", "path", "verdicts"})
"""List fields that hold chunk ids, deficiency ids, node names or verdicts, never user text."""
ID_KEYED = frozenset({"scores"})
"""Dict fields keyed by chunk id (a grade's scores); others (validation's support) are keyed by claim text."""


def _number_list(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _field(prefix: str, name: str, value: Any, out: Attributes) -> None:
    key = f"{prefix}.{name}"
    content = tracing.capture_content()
    if value is None:
        return
    if isinstance(value, bool | int | float):
        out[key] = value
    elif isinstance(value, str):
        if name in LABELS:
            out[key] = value
        else:
            out.update(tracing.text(key, value))
    elif isinstance(value, Mapping):
        out[f"{key}.count"] = len(value)
        numbers = list(value.values())
        if _number_list(numbers):
            out[f"{key}.values"] = [float(v) for v in numbers]
        if name in ID_KEYED:
            out[f"{key}.keys"] = [str(k) for k in value]
        elif content:
            out[f"{key}.keys"] = [tracing.redacted(str(k)) for k in value]
    elif isinstance(value, list | tuple):
        items = list(value)
        out[f"{key}.count"] = len(items)
        if items and _number_list(items):
            out[key] = list(items)
        elif all(isinstance(v, str) for v in items) and name in IDS:
            out[key] = [str(v) for v in items]
        elif all(isinstance(v, str) for v in items) and content:
            out[key] = [tracing.redacted(str(v)) for v in items]


def model_attributes(prefix: str, model: BaseModel) -> Attributes:
    """Every declared field of a typed model (a node's detail, a trace summary) as attributes."""
    out: Attributes = {}
    for name in type(model).model_fields:
        _field(prefix, name, getattr(model, name), out)
    return out


def node_attributes(record: TraceRecord) -> Attributes:
    """A node span's attributes: the record's decision and numbers, and its detail's fields under
    `ragloop.<node>.`."""
    out: Attributes = {
        "ragloop.node": record.node,
        "ragloop.decision": record.decision,
        "ragloop.latency_ms": record.latency_ms,
        "ragloop.tokens": record.tokens,
        "ragloop.cost_usd": record.cost,
        "ragloop.cached": record.cached,
        "openinference.span.kind": "RETRIEVER" if record.node == "retrieve" else "CHAIN",
    }
    out.update(model_attributes(f"ragloop.{record.node}", record.detail))
    return out


def summary_attributes(summary: TraceSummary) -> Attributes:
    return model_attributes("ragloop.trace", summary)


def graph_input_attributes(question: str, thread_id: str | None) -> Attributes | None:
    """The graph span's attributes at its start (None when tracing is off: nothing computed)."""
    if not tracing.enabled():
        return None
    out: Attributes = {"ragloop.conversation": thread_id is not None, "openinference.span.kind": "CHAIN"}
    out.update(tracing.text("ragloop.question", question))
    if tracing.capture_content():
        out["input.value"] = tracing.redacted(question)  # what Phoenix and Langfuse show as the span's input
    return out


def answer_attributes(answer: Answer) -> Attributes:
    """The graph span's attributes: the turn's trace summary and the answer's outcome (lengths, not text)."""
    out: Attributes = {
        "ragloop.pipeline_version": answer.pipeline_version,
        "ragloop.refused": answer.refused,
        "ragloop.quality_score": float(answer.quality_score),
        "ragloop.citations.count": len(answer.citations),
        "ragloop.model_calls": answer.model_calls,
    }
    out.update(tracing.text("ragloop.answer", answer.answer))
    if tracing.capture_content():
        out["output.value"] = tracing.redacted(answer.answer)
    out.update(summary_attributes(answer.trace.summarize()))
    return out
