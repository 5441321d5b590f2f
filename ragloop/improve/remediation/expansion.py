"""Expansion-cache entry (embedding failures): the failed question's embedding with its oracle
chunk ids, so a later query within cosine `expansion_threshold` gets those chunks pre-loaded into
the candidate pool. Revert puts back whatever the entry replaced (usually nothing)."""

from __future__ import annotations

import hashlib
import time
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ragloop.improve.remediation.base import (
    AppliedChange,
    Effect,
    QueryGroup,
    Remediation,
    RemediationContext,
    RemediationError,
)
from ragloop.improve.remediation.expansion_cache import ExpansionEntry
from ragloop.improve.remediation.measure import group_for, questions_of
from ragloop.improve.types import ActionKind
from ragloop.ingest.registry import normalize_query
from ragloop.retrieval.retriever import Retriever


class ExpansionPayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    collection: str
    question: str = Field(min_length=1)
    chunk_ids: tuple[str, ...] = Field(min_length=1)
    """The oracle chunks to pre-load, best first."""


def expansion_component(collection: str, question: str) -> str:
    digest = hashlib.sha256(normalize_query(question).encode()).hexdigest()[:16]
    return f"expansion:{collection}:{digest}"


class ExpansionCacheAction(Remediation[ExpansionPayload]):
    kind: ClassVar[ActionKind] = ActionKind.EXPANSION_CACHE
    effect: ClassVar[Effect] = Effect.DIRECT
    cost: ClassVar[float] = 1.0
    payload_type: ClassVar[type[BaseModel]] = ExpansionPayload

    @classmethod
    def conflict_key(cls, component: str, dedupe_key: str) -> str:
        """Entries for different query groups touch different cache rows: only one group conflicts."""
        return f"{component}#{dedupe_key}"

    @property
    def entry_id(self) -> str:
        return expansion_component(self.payload.collection, self.payload.question).split(":", 2)[2]

    def group(self, ctx: RemediationContext) -> QueryGroup:
        p = self.payload
        questions = questions_of(ctx, self.spec.answer_ids, (p.question,))
        return group_for(ctx, p.collection, questions, chunk_ids=p.chunk_ids)

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        p = self.payload
        coll = ctx.collections(p.collection)
        gen = coll.load()
        known = [c for c in p.chunk_ids if c in gen.position]
        if not known:
            raise RemediationError(f"none of the oracle chunks {list(p.chunk_ids)} is in {p.collection!r} now")
        vector = Retriever(coll, ctx.config.retrieval).embedder.embed_one(p.question)
        if not vector.any():
            raise RemediationError(f"the question {p.question!r} has no embeddable text")
        backend = ctx.expansion_backend(p.collection)
        previous = backend.get(self.entry_id)
        version = backend.put(
            ExpansionEntry(
                entry_id=self.entry_id,
                query=p.question,
                embedder=gen.manifest.embedder,
                vector=vector,
                chunk_ids=tuple(known),
                source=f"action:{self.spec.action_id}",
                created_at=time.time(),
            )
        )
        prev = None
        if previous is not None:
            prev = {
                "query": previous.query,
                "embedder": previous.embedder,
                "vector": previous.vector.tolist(),
                "chunk_ids": list(previous.chunk_ids),
                "source": previous.source,
                "created_at": previous.created_at,
            }
        return AppliedChange(
            kind=self.kind,
            effect=self.effect,
            summary=f"expansion entry {self.entry_id} ({backend.name}, v{version}): {len(known)} chunks",
            revert={"backend": backend.name, "entry_id": self.entry_id, "previous": prev, "chunk_ids": known},
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        backend = ctx.expansion_backend(self.payload.collection)
        prev = change.revert.get("previous")
        if prev:
            import numpy as np

            backend.put(
                ExpansionEntry(
                    entry_id=self.entry_id,
                    query=prev["query"],
                    embedder=prev["embedder"],
                    vector=np.asarray(prev["vector"], dtype=np.float32),
                    chunk_ids=tuple(prev["chunk_ids"]),
                    source=prev["source"],
                    created_at=prev["created_at"],
                )
            )
        else:
            backend.remove(self.entry_id)
