"""From a diagnosis to the rows of the remediation queue: which kind, on which component, with
which payload, evidence and expected delta, at which priority. The diagnosis pass calls this and
hands the result to `store.improvement_actions.propose`; the scheduler reads the same fields back.

Priority (the seed's four factors): impact (answers in the action's group: similar queries that
would benefit) x confidence / cost, doubled when a user reported the failure; the scheduler also
takes user-reported actions first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ragloop.improve.remediation.expansion import ExpansionCacheAction, expansion_component
from ragloop.improve.remediation.gap import KnowledgeGapAction
from ragloop.improve.remediation.ranking import RankingBufferAction
from ragloop.improve.remediation.rechunk import RechunkAction, rechunk_component
from ragloop.improve.remediation.thresholds import ThresholdRecalibrationAction
from ragloop.improve.types import (
    ActionKind,
    ChunkingEvidence,
    Diagnosis,
    EmbeddingEvidence,
    KnowledgeGapEvidence,
    RankingEvidence,
)
from ragloop.ingest.registry import normalize_query

EXPECTED_SHARE = 0.5
"""Expected target recall@k gain of a direct fix on its group, per unit of confidence: the failed
question itself is fixed outright, its paraphrases partly."""
USER_REPORTED_BOOST = 2.0
COSTS: dict[ActionKind, float] = {
    cls.kind: cls.cost
    for cls in (
        ExpansionCacheAction,
        RechunkAction,
        KnowledgeGapAction,
        RankingBufferAction,
        ThresholdRecalibrationAction,
    )
}


def priority(kind: ActionKind, *, impact: int, confidence: float, user_reported: bool) -> float:
    boost = USER_REPORTED_BOOST if user_reported else 1.0
    return round(max(impact, 1) * confidence * boost / COSTS.get(kind, 1.0), 6)


@dataclass(frozen=True)
class ActionProposal:
    """The arguments of `ImprovementActions.propose`."""

    kind: ActionKind
    component: str
    dedupe_key: str
    domain: str
    answer_ids: tuple[str, ...]
    evidence: dict[str, Any]
    payload: dict[str, Any]
    expected_delta: dict[str, Any] | None = None
    priority: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def propose_kwargs(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "answer_ids": list(self.answer_ids),
            "evidence": self.evidence,
            "expected_delta": self.expected_delta,
            "payload": self.payload,
            "priority": self.priority,
        }


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]


def proposals_for(
    diagnosis: Diagnosis,
    *,
    question: str,
    collection: str,
    answer_id: str,
    reasons: Sequence[str] = (),
) -> list[ActionProposal]:
    """One proposal per action the diagnosis names that a remediation implements."""
    user_reported = any(r in ("negative_feedback", "correction") for r in reasons)
    evidence: dict[str, Any] = {
        "mode": diagnosis.mode.value,
        "confidence": diagnosis.confidence,
        "rule": diagnosis.rule,
        "reasons": list(reasons),
        "user_reported": user_reported,
        "diagnosis": diagnosis.evidence.model_dump(mode="json"),
    }
    expected = {"metric": "target_recall_at_k", "value": round(EXPECTED_SHARE * diagnosis.confidence, 4)}
    ev = diagnosis.evidence
    out: list[ActionProposal] = []
    for action in diagnosis.actions:
        kind = action.kind
        payload: dict[str, Any]
        delta: dict[str, Any] | None = None
        if kind is ActionKind.EXPANSION_CACHE and isinstance(ev, EmbeddingEvidence | RankingEvidence):
            chunk_ids = list(action.chunk_ids) or [m.chunk_id for m in ev.missed]
            component = expansion_component(collection, question)
            payload = {"collection": collection, "question": question, "chunk_ids": chunk_ids}
            dedupe, delta = _digest(normalize_query(question)), expected
        elif kind is ActionKind.RECHUNK_DOCUMENT and isinstance(ev, ChunkingEvidence):
            component = rechunk_component(collection, ev.doc_id)
            payload = {"collection": collection, "doc_id": ev.doc_id, "sentence": ev.sentence, "questions": [question]}
            dedupe, delta = _digest(ev.doc_id, *ev.chunk_ids), expected
        elif kind is ActionKind.RANKING_BUFFER and isinstance(ev, RankingEvidence):
            tuples = [
                {"query": question, "chunk_id": m.chunk_id, "rank": m.rank, "score": m.oracle_score} for m in ev.missed
            ]
            component = f"ranking:{collection}"
            payload = {"collection": collection, "tuples": tuples}
            dedupe = _digest(answer_id, normalize_query(question))
        elif kind is ActionKind.KNOWLEDGE_GAP_LOG and isinstance(ev, KnowledgeGapEvidence):
            component = f"gaps:{collection}"
            payload = {"collection": collection, "question": question}
            dedupe = _digest(normalize_query(question))
        else:
            continue
        out.append(
            ActionProposal(
                kind=kind,
                component=component,
                dedupe_key=dedupe,
                domain=collection,
                answer_ids=(answer_id,),
                evidence={**evidence, "reason": action.reason},
                payload=payload,
                expected_delta=delta,
                priority=priority(kind, impact=1, confidence=diagnosis.confidence, user_reported=user_reported),
            )
        )
    return out
