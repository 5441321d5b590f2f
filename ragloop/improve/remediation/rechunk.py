"""Per-document re-chunk (chunking failures): the document whose supporting passage straddles a
chunk boundary is re-chunked alone, with a larger size and overlap (x `rechunk_growth`, overlap
`rechunk_overlap_share` of the size: the seed's 512 -> 800/200; up to `rechunk_steps` growths, the
smallest whose preview gains), recorded as its registry
override and indexed as a new generation (`ragloop.retrieval.rechunk`). The document is the one
the diagnosis named (`payload.doc_id`): a whole file when the file is one document, one record
when the file holds many (a JSONL corpus), so the rest of that corpus keeps its chunks and vectors.
Revert re-chunks it with the previous override, reusing the previous vectors: the same chunks, ids
and vectors as before. Before any of that, `preview` measures the action's query group on the index
as the re-chunk would leave it (in memory), so a merge that still leaves the supporting sentence
outside the top k is rejected by the scheduler instead of served for an audit window and reverted."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ragloop.improve.remediation.base import (
    AppliedChange,
    Effect,
    GroupMeasurement,
    QueryGroup,
    Remediation,
    RemediationContext,
)
from ragloop.improve.remediation.measure import group_for, measure, questions_of
from ragloop.improve.types import ActionKind
from ragloop.ingest.registry import DocumentOverride
from ragloop.retrieval.rechunk import preview_rechunk, rechunk_document, source_of


class RechunkPayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    collection: str
    doc_id: str
    sentence: str = ""
    """The supporting sentence that straddled the boundary: what a hit must hold whole (default:
    the diagnosis' chunking evidence)."""
    question: str = ""
    questions: tuple[str, ...] = ()
    size: int | None = Field(default=None, ge=50)
    overlap: int | None = Field(default=None, ge=0)


def rechunk_component(collection: str, doc_id: str) -> str:
    return f"doc:{collection}/{doc_id}"


class RechunkAction(Remediation[RechunkPayload]):
    kind: ClassVar[ActionKind] = ActionKind.RECHUNK_DOCUMENT
    effect: ClassVar[Effect] = Effect.DIRECT
    cost: ClassVar[float] = 5.0
    payload_type: ClassVar[type[BaseModel]] = RechunkPayload
    _previewed: DocumentOverride | None = None
    """The size `preview` measured last: what `apply` writes (the scheduler previews, then applies)."""

    def group(self, ctx: RemediationContext) -> QueryGroup:
        p = self.payload
        given = p.questions or ((p.question,) if p.question else ())
        questions = questions_of(ctx, self.spec.answer_ids, given)
        sentence = p.sentence or str((self.spec.evidence.get("diagnosis") or {}).get("sentence") or "")
        return group_for(ctx, p.collection, questions, passages=(sentence,))

    def targets(self, ctx: RemediationContext, rel: str) -> list[DocumentOverride]:
        """The larger chunkings to try for the payload's document `doc_id`, held in source file
        `rel`, smallest first: the payload's size alone, else `rechunk_steps` growths of the
        document's current size."""
        p = self.payload
        coll = ctx.collections(p.collection)
        size, overlap = coll.registry.chunking_for(ctx.config.chunking).for_record(rel, p.doc_id)
        out: list[DocumentOverride] = []
        for _ in range(1 if p.size else ctx.settings.rechunk_steps):
            size = p.size or max(size + 1, round(size * ctx.settings.rechunk_growth))
            grown = max(overlap, round(size * ctx.settings.rechunk_overlap_share))
            share = grown if p.overlap is None else p.overlap
            out.append(DocumentOverride(p.doc_id, size, min(share, size - 1), f"action:{self.spec.action_id}"))
        return out

    def preview(self, ctx: RemediationContext, group: QueryGroup, baseline: GroupMeasurement) -> GroupMeasurement:
        """The group on the index as each size would leave it (built in memory), smallest first,
        up to the first under which a question finds more of its targets than at `baseline`:
        `apply` writes that one. A merged chunk that still misses a dense top k shows here, before
        a generation is written and audited."""
        coll = ctx.collections(self.payload.collection)
        doc_id = self.payload.doc_id
        after = baseline
        for override in self.targets(ctx, source_of(coll, doc_id)):
            after = measure(ctx, group, preview_rechunk(coll, doc_id, override, ctx.config))
            self._previewed = override
            if any(a > b for a, b in zip(after.scores, baseline.scores, strict=True)):
                break
        return after

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        coll = ctx.collections(self.payload.collection)
        doc_id = self.payload.doc_id
        override = self._previewed or self.targets(ctx, source_of(coll, doc_id))[0]
        r = rechunk_document(coll, doc_id, override, ctx.config)
        before = r.override_before
        return AppliedChange(
            kind=self.kind,
            effect=self.effect,
            summary=(
                f"re-chunked {doc_id} at size {override.size}/overlap {override.overlap}: "
                f"{len(r.chunk_ids_before)} -> {len(r.chunk_ids_after)} chunks, generation "
                f"{r.generation_before} -> {r.generation_after}"
            ),
            revert={
                "rel": r.rel,
                "doc_id": doc_id,
                "override_before": None
                if before is None
                else {"size": before.size, "overlap": before.overlap, "source": before.source},
                "generation_before": r.generation_before,
                "generation_after": r.generation_after,
                "chunk_ids_before": list(r.chunk_ids_before),
                "chunk_ids_after": list(r.chunk_ids_after),
            },
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        coll = ctx.collections(self.payload.collection)
        # changes applied before record-level re-chunks carry only the file ("rel"), which they re-chunked whole
        doc_id = str(change.revert.get("doc_id") or change.revert["rel"])
        prev = change.revert.get("override_before")
        override = (
            None
            if prev is None
            else DocumentOverride(rel=doc_id, size=prev["size"], overlap=prev["overlap"], source=prev["source"])
        )
        rechunk_document(coll, doc_id, override, ctx.config)
