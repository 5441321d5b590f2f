"""Knowledge gap (nothing in the corpus answers): the gap log itself (grouping, counts, generated
questions) belongs to the diagnosis pass and `store.knowledge_gaps`; this action only records the
link in the audit log. Nothing that serves changes, so there is nothing to revert."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from ragloop.improve.remediation.base import AppliedChange, Effect, Remediation, RemediationContext
from ragloop.improve.types import ActionKind


class GapPayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    collection: str
    question: str = ""
    gap_id: str | None = None


class KnowledgeGapAction(Remediation[GapPayload]):
    kind: ClassVar[ActionKind] = ActionKind.KNOWLEDGE_GAP_LOG
    effect: ClassVar[Effect] = Effect.RECORD
    cost: ClassVar[float] = 0.5
    payload_type: ClassVar[type[BaseModel]] = GapPayload

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        p = self.payload
        gaps = ctx.store.knowledge_gaps
        gap = gaps.get(p.gap_id) if p.gap_id else None
        for answer_id in self.spec.answer_ids if gap is None else ():
            gap = gaps.for_answer(answer_id, p.collection)
            if gap is not None:
                break
        if gap is None:
            return AppliedChange(kind=self.kind, effect=self.effect, summary=f"gap not in the log yet: {p.question!r}")
        return AppliedChange(
            kind=self.kind,
            effect=self.effect,
            summary=f"linked to knowledge gap {gap.gap_id} ({gap.count} questions)",
            revert={"gap_id": gap.gap_id, "count": gap.count},
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        return None
