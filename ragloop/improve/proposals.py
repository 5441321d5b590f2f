"""From a diagnosis's proposed actions to rows of the remediation queue (`improvement_actions`).

The classifier says *what kind* of fix a failure calls for (`ProposedAction`); this module says
*which component* it changes and *when two proposals are the same action*, which is what makes
"apply once" and "conflicts serialised" mean something:

| kind | component | dedupe key | why |
|---|---|---|---|
| expansion_cache | `expansion_cache:<collection>` | the question's hash | one entry per query group |
| rechunk_document | `doc:<collection>/<doc_id>` | the index generation | one re-chunk per document version |
| knowledge_gap_log | `knowledge_gaps:<collection>` | the gap group id | one entry per group; more answers join it |
| ranking_buffer | `ranking_buffer:<collection>` | the pipeline version | tuples accumulate until the refit |
| chunking_buffer | `chunking_buffer:<collection>` | version, generation | one fit per index state |
| prompt_candidate, threshold_recalibration | `pipeline` | `<collection>:<version>` | global: a candidate per version |

Priority is the classifier's confidence, doubled when a user reported the failure (negative
feedback or a correction: the seed's "user-reported first"), halved into [0.25, 1]; the scheduler
re-weighs it with impact and cost. `expected_delta` is left to the remediation that applies it
(it knows what it will change); the evidence carries what the diagnosis measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragloop.improve.types import ActionKind, Diagnosis, ProposedAction
from ragloop.store import question_hash


@dataclass(frozen=True)
class ActionSpec:
    kind: str
    component: str
    dedupe_key: str
    domain: str
    priority: float
    evidence: dict[str, Any]
    payload: dict[str, Any]


@dataclass(frozen=True)
class Context:
    """Where a diagnosis came from."""

    answer_id: str
    question: str
    collection: str
    pipeline_version: str
    generation: int
    user_reported: bool
    gap_id: str | None = None


def priority(diagnosis: Diagnosis, user_reported: bool) -> float:
    return round(diagnosis.confidence * (1.0 if user_reported else 0.5), 4)


def spec_for(action: ProposedAction, diagnosis: Diagnosis, ctx: Context) -> ActionSpec | None:
    """The queue row for one proposed action; None for a knowledge-gap entry with no group."""
    kind = ActionKind(action.kind)
    coll, version = ctx.collection, ctx.pipeline_version
    if kind is ActionKind.EXPANSION_CACHE:
        component, key = f"expansion_cache:{coll}", question_hash(ctx.question)
    elif kind is ActionKind.RECHUNK_DOCUMENT:
        component, key = f"doc:{coll}/{action.doc_id or ''}", f"generation:{ctx.generation}"
    elif kind is ActionKind.KNOWLEDGE_GAP_LOG:
        if ctx.gap_id is None:
            return None
        component, key = f"knowledge_gaps:{coll}", ctx.gap_id
    elif kind is ActionKind.RANKING_BUFFER:
        component, key = f"ranking_buffer:{coll}", version
    elif kind is ActionKind.CHUNKING_BUFFER:
        component, key = f"chunking_buffer:{coll}", f"{version}:generation:{ctx.generation}"
    else:  # prompt candidates, threshold recalibration: global changes, one candidate per version
        component, key = "pipeline", f"{coll}:{version}"
    payload: dict[str, Any] = {
        "collection": coll,
        "pipeline_version": version,
        "question": ctx.question,
        "chunk_ids": list(action.chunk_ids),
        "doc_id": action.doc_id,
        "generation": ctx.generation,
    }
    if ctx.gap_id is not None:
        payload["gap_id"] = ctx.gap_id
    evidence = {
        "answer_id": ctx.answer_id,
        "failure_mode": str(diagnosis.mode),
        "confidence": diagnosis.confidence,
        "rule": diagnosis.rule,
        "reason": action.reason,
        "diagnosis": diagnosis.evidence.model_dump(mode="json"),
    }
    return ActionSpec(
        kind=str(kind),
        component=component,
        dedupe_key=key,
        domain=coll,
        priority=priority(diagnosis, ctx.user_reported),
        evidence=evidence,
        payload=payload,
    )
