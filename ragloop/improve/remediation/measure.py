"""Measuring an action's query group: before the change, and again when the auditor's window ends.

The group is the failed question(s) plus the offline paraphrases of each (the "similar queries"
an expansion entry or a re-chunk claims to help), frozen at apply time so before and after are
the same items. Each question scores the share of the group's targets found in the top k of the
retriever that serves now (its expansion lookup included); the delta is judged by a paired
bootstrap interval over the questions, never by the point alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ragloop.evaluation.stats import paired_bootstrap, sign_flip_gain_p
from ragloop.improve.paraphrase import OfflineParaphraser, Vocabulary
from ragloop.improve.remediation.base import GroupMeasurement, QueryGroup, RemediationContext
from ragloop.improve.remediation.expansion_cache import ExpansionCache
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever
from ragloop.retrieval.types import Hit


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def with_paraphrases(collection: Collection, questions: Sequence[str], enabled: bool = True) -> tuple[str, ...]:
    """The questions and, when `enabled`, their offline paraphrases, distinct, in a stable order."""
    out = list(questions)
    if enabled and questions:
        para = OfflineParaphraser(Vocabulary.from_chunks(collection.load().chunks))
        for q in questions:
            out += para.variants(q)
    seen: set[str] = set()
    distinct = []
    for q in out:
        if q.strip() and _norm(q) not in seen:
            seen.add(_norm(q))
            distinct.append(q)
    return tuple(distinct)


def serving_retriever(ctx: RemediationContext, collection: str, index: Collection | None = None) -> Retriever:
    """The retriever as it serves now: the context's retrieval config and the collection's
    expansion cache (refreshed on every lookup, so a change just applied is visible), over
    `index` when given (a preview of the collection after a change) instead of the collection."""
    coll = ctx.collections(collection)
    cache = ExpansionCache(
        ctx.expansion_backend(collection),
        threshold=ctx.settings.expansion_threshold,
        max_chunks=ctx.settings.expansion_max_chunks,
        embedder=coll.load().manifest.embedder,
        refresh_s=0.0,
    )
    return Retriever(index or coll, ctx.config.retrieval, expansion=cache)


def score_hits(hits: Sequence[Hit], group: QueryGroup) -> float:
    targets = len(group.chunk_ids) + len(group.passages)
    if targets == 0:
        return 0.0
    ids = {h.chunk_id for h in hits}
    texts = [_norm(h.text) for h in hits]
    found = sum(1 for c in group.chunk_ids if c in ids)
    found += sum(1 for p in group.passages if any(_norm(p) in t for t in texts))
    return found / targets


def measure(ctx: RemediationContext, group: QueryGroup, index: Collection | None = None) -> GroupMeasurement:
    """The group's scores on the serving retriever (over `index` when given: a preview)."""
    retriever = serving_retriever(ctx, group.collection, index)
    scores = tuple(score_hits(retriever.retrieve(q, group.k), group) for q in group.questions)
    return GroupMeasurement(
        scores=scores,
        measured_at=ctx.clock.now().isoformat(),
        generation=(index or ctx.collections(group.collection)).generation(),
    )


@dataclass(frozen=True)
class Delta:
    """after - before over the group's questions, with its paired bootstrap interval (95% unless the
    caller pays for picking the best of several) and the exact one-sided p of a gain (`p`):
    on a few questions the interval alone over-states certainty (`stats.sign_flip_gain_p`)."""

    before: float
    after: float
    diff: float
    lo: float
    hi: float
    n: int
    p: float = math.nan
    """One-sided p-value that after beats before (sign-flip, exact when few questions differ)."""
    alpha: float = 0.05
    """The two-sided level of the interval."""

    def to_json(self) -> dict[str, float | int | None]:
        def r(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {
            "metric": "target_recall_at_k",  # type: ignore[dict-item]
            "before": r(self.before),
            "after": r(self.after),
            "diff": r(self.diff),
            "lo": r(self.lo),
            "hi": r(self.hi),
            "n": self.n,
            "p": r(self.p),
        }


def delta(
    before: Sequence[float], after: Sequence[float], *, resamples: int = 1000, seed: int = 20240601, alpha: float = 0.05
) -> Delta:
    if len(before) != len(after):
        raise ValueError("before and after must measure the same questions")
    n = len(before)
    if n == 0:
        return Delta(math.nan, math.nan, math.nan, math.nan, math.nan, 0)
    diff, lo, hi = paired_bootstrap(list(before), list(after), resamples=resamples, seed=seed, alpha=alpha)
    p = sign_flip_gain_p(before, after, seed=seed)
    return Delta(sum(before) / n, sum(after) / n, diff, lo, hi, n, p, alpha)


def questions_of(ctx: RemediationContext, answer_ids: Sequence[str], given: Sequence[str] = ()) -> tuple[str, ...]:
    """The questions an action names, else those of its answers (as stored with each query)."""
    if given:
        return tuple(given)
    out = []
    for answer_id in answer_ids:
        query = ctx.store.queries.query_for_answer(answer_id)
        if query is not None:
            out.append(query.question_text)
    return tuple(out)


def group_for(
    ctx: RemediationContext,
    collection: str,
    questions: Sequence[str],
    *,
    chunk_ids: Sequence[str] = (),
    passages: Sequence[str] = (),
) -> QueryGroup:
    return QueryGroup(
        collection=collection,
        questions=with_paraphrases(ctx.collections(collection), questions, ctx.settings.paraphrases),
        chunk_ids=tuple(chunk_ids),
        passages=tuple(p for p in passages if p.strip()),
        k=ctx.config.retrieval.k,
    )
