"""Typed values that live in the graph state; pydantic so checkpoints serialise them."""

from __future__ import annotations

import hashlib
import time
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragloop.agent.details import AnyDetail, parse_detail

Verdict = Literal["CORRECT", "AMBIGUOUS", "INCORRECT"]
TerminationReason = Literal[
    "converged",  # no open deficiency above the severity floor
    "plateau",  # the quality score stopped improving
    "max_cycles",  # critique cycles exhausted
    "validated",  # citations validated; critique switched off
    "budget_steps",
    "budget_model_calls",
    "budget_time",
    "recursion_limit",
    "no_grounded_context",  # refused: nothing relevant enough was found
    "no_valid_citations",  # refused: the hallucination gate found no valid citation
    "insufficient_evidence",  # refused: an answer was drafted but its evidence did not hold up
    "not_answered",  # refused: the answer check read the drafted answer as not answering the question
]
REFUSAL_REASONS: frozenset[str] = frozenset(
    {"no_grounded_context", "no_valid_citations", "insufficient_evidence", "not_answered"}
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class RetrievedChunk(_Model):
    chunk_id: str
    doc_id: str
    title: str = ""
    heading_path: tuple[str, ...] = ()
    text: str
    source: Literal["internal", "external"] = "internal"
    query: str = ""
    retrieval_score: float = 0.0
    rank: int = 0
    """Rank in its retrieval (1-based; 0 when not ranked: external results, older checkpoints)."""
    stage_scores: dict[str, float] = Field(default_factory=dict)
    stage_ranks: dict[str, int] = Field(default_factory=dict)
    grade: float | None = None
    grade_evidence: str = ""


class KeptStrip(_Model):
    """A strip that survived refinement, with provenance back to its chunk."""

    text: str
    chunk_id: str
    doc_id: str
    start: int
    end: int
    kind: str = "sentence"
    score: float = 0.0


class Citation(_Model):
    n: int
    chunk_id: str
    doc_id: str
    title: str = ""
    heading_path: tuple[str, ...] = ()  # where in the document the cited chunk stands
    excerpt: str = ""
    score: float = 0.0


class DeficiencyType(StrEnum):
    OUTDATED_SOURCE = "outdated_source"
    MISSING_ASPECT = "missing_aspect"
    INCORRECT_NUMBER = "incorrect_number"
    MISSING_EXEMPTION = "missing_exemption"
    CONTRADICTORY_SOURCES = "contradictory_sources"
    INSUFFICIENT_SPECIFICITY = "insufficient_specificity"
    UNSUPPORTED_CLAIM = "unsupported_claim"


class Deficiency(_Model):
    id: str
    type: DeficiencyType
    description: str
    affected_section: str
    correction_query: str
    severity: float = Field(ge=0.0, le=1.0)
    cycle_found: int
    status: Literal["open", "addressed", "unresolvable"] = "open"
    attempts: int = 0

    @staticmethod
    def make_id(kind: DeficiencyType, affected_section: str) -> str:
        """Content hash: the same problem found again keeps its id (and its attempt count)."""
        norm = " ".join(affected_section.lower().split())
        return hashlib.sha256(f"{kind.value}:{norm}".encode()).hexdigest()[:12]


class CycleRecord(_Model):
    cycle: int
    found: list[str]
    resolved: list[str]
    score: float
    queries: list[str]
    at: float = Field(default_factory=time.time)


class TraceRecord(_Model):
    """One node's step. `detail` is the typed model of `node` (`ragloop.agent.details.DETAILS`):
    consumers narrow it with isinstance and read attributes, never string keys."""

    node: str
    decision: str
    detail: AnyDetail
    latency_ms: float = 0.0
    tokens: int = 0
    cost: float = 0.0
    cached: bool = False
    at: float = Field(default_factory=time.time)

    @model_validator(mode="before")
    @classmethod
    def _typed_detail(cls, data: Any) -> Any:
        """Stored and checkpointed records carry a plain dict: it becomes its node's model here."""
        if isinstance(data, dict):
            node = str(data.get("node") or "")
            decision = str(data.get("decision") or "")
            return {
                **data,
                "node": node,
                "decision": decision,
                "detail": parse_detail(node, data.get("detail"), strict=False),
            }
        return data
