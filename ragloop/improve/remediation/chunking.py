"""Chunking buffer (chunking failures across documents) -> a collection-wide chunking candidate.

A per-document re-chunk fixes the document a failure named. When failures name many documents, the
collection's chunk size is what is wrong, and fixing documents one at a time never reaches those
no traffic has failed on yet (MTRAG-UN's degraded start: eleven kept re-chunks, held-out accuracy
unmoved). So every chunking failure also proposes this action, one per collection, serving version
and index generation; its buffer is every completed chunking diagnosis of that collection under
the serving version (the pool grows with traffic; a re-chunk or ingest that changes the index
makes the next failure propose a fresh fit on the grown pool). At `chunking_buffer_size` distinct
documents the fit runs:

- For each size in growing steps of the serving size (x `rechunk_growth`, `chunking_steps` of them;
  overlap `rechunk_overlap_share` of the size), the collection is re-chunked in memory
  (`ragloop.retrieval.variants.preview_variant`) and every buffered question is scored on it with
  the serving retriever: does a top-k hit hold its supporting sentence whole (the re-chunk's target).
  Only the *focus* is re-chunked and embedded: the buffered documents and those of each question's
  top `FOCUS_DEPTH` x k hits on the serving index; every other document keeps its serving chunks.
  A larger chunk's vector is close to the mean of its parts', so a document none of whose chunks
  comes near a question's top k rarely enters it at another size; embedding the whole collection
  four times took minutes of a busy 2-core machine's worker (MTRAG-UN: the focus is ~20% of it).
  The serving size is previewed the same way, and every size on the focus *without* its
  per-document re-chunks: a re-chunk that fixed a pooled failure fixed that one document, and
  scored on the patched index the failure looked fixed at every size, so the evidence of what the
  size does for the documents no failure has named yet shrank as the patches grew (a PostgreSQL
  run's pool: 3 of 15 failures already whole at serving, then 7 of 17 a day later).
- A size qualifies when the paired bootstrap interval of its gain over the serving index lies above
  zero, at 95% Bonferroni-corrected for the sizes tried, and the exact sign-flip test, family-wise
  over the sizes by its max statistic (`stats.sign_flip_max_gain_p`), gives one-sided p at most
  what is left of `BUDGET` (0.025): on 8-35 pooled questions the percentile interval alone is
  anti-conservative. Picking the best of four is paid for either way; the max statistic pays less
  than Bonferroni because the sizes gain on the same questions (a passage a 1310 chunk holds whole,
  an 819 one often holds too).
- The fit looks again whenever the pool grows, and each look is another chance to qualify a size
  that does not help: at 0.025 a look, eight looks a week let a null pool through in up to 3.1% of
  weeks (`benchmarks/chunking_fit_level.py`). So the looks at one serving version's pool share the
  budget: each look may spend up to an allowance that grows with the items that differ (`allowance`:
  linear in their number, the whole budget from 16 on), less what the earlier looks spent, and it
  spends its test's *attained size* at that level (`stats.sign_flip_max_gain_test`), read back by
  the next look from its audit entry (`spent_before`). The exact test is discrete, so a look on a
  handful of differing items, which could not have rejected, spends nothing. The levels depend on
  how many items differ, never on which way, so the union bound over the looks holds the week's
  error at 0.025 whatever their number. A new serving version pools new failures and starts afresh.
- The qualifying size with the largest mean gain (the smaller on a tie) becomes a *candidate* pipeline
  version. It never serves from here: it is served from its own index variant only once the golden
  check passes it, because a larger chunk that helps these questions can still dilute others (the
  check's answer accuracy and document recall gates) or answer what should be refused (its refusal
  gates). Retrieval is deterministic given the index, so the fit's gain is what an experiment would
  measure on these questions; the candidate then goes current on the golden check
  (`ragloop.experiments.off_policy.chunking_evidence`), as a retrieval refit does.

The decision, either way, is its own audit entry (`chunking_refit`) with every size's interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from ragloop.config import PipelineConfig
from ragloop.evaluation.stats import DEFAULT_SEED, sign_flip_max_gain_test
from ragloop.improve.remediation.base import (
    AppliedChange,
    AuditNote,
    Effect,
    QueryGroup,
    Remediation,
    RemediationContext,
    register_candidate,
)
from ragloop.improve.remediation.measure import Delta, delta, score_hits, serving_retriever
from ragloop.improve.types import ActionKind
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.variants import IndexVariant, preview_variant
from ragloop.store import DiagnosisRecord, Store
from ragloop.store.vocabulary import DiagnosisStatus, FailureMode

REFIT_ACTION = "chunking_refit"
FOCUS_DEPTH = 10
"""Hits per question, as a multiple of k, whose documents a fit re-chunks (see the module's text)."""
ALPHA = 0.05
"""Family-wise over the sizes one fit tries."""
BUDGET = ALPHA / 2
"""One-sided family-wise error over every look at one serving version's pool (see the module's text)."""
FULL_INFORMATION = 16
"""Differing items from which a look may spend the whole budget (`allowance`)."""
LOOKS_READ = 200


class ChunkingItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    question: str
    sentence: str
    doc_id: str


class ChunkingPayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    collection: str
    items: tuple[ChunkingItem, ...] = ()


POOL_LIMIT = 1000


def items_of(store: Store, answer_ids: Sequence[str]) -> list[ChunkingItem]:
    """The (question, straddling sentence, document) of the answers' completed chunking diagnoses."""
    return _items(store, [store.diagnoses.get(a) for a in answer_ids])


def pooled_items(store: Store, collection: str, version: str) -> list[ChunkingItem]:
    """Every completed chunking diagnosis of `collection` under pipeline `version` (newest first)."""
    rows = store.diagnoses.listed(
        status=DiagnosisStatus.COMPLETED,
        failure_mode=FailureMode.CHUNKING_FAILURE,
        collection=collection,
        limit=POOL_LIMIT,
    )
    return _items(store, [r for r in rows if r.pipeline_version == version])


def _items(store: Store, records: Sequence[DiagnosisRecord | None]) -> list[ChunkingItem]:
    out: list[ChunkingItem] = []
    for record in records:
        evidence = (record.evidence or {}) if record is not None else {}
        if record is None or evidence.get("kind") != "chunking" or not evidence.get("sentence"):
            continue
        question = str((record.diagnosis_input or {}).get("question") or "")
        if not question:
            query = store.queries.query_for_answer(record.answer_id)
            question = query.question_text if query is not None else ""
        if question:
            out.append(ChunkingItem(question=question, sentence=evidence["sentence"], doc_id=evidence["doc_id"]))
    return out


def _looks(store: Store, collection: str, version: str) -> list[dict[str, Any]]:
    """The evidence of every earlier fit for `collection` under `version`, newest first."""
    entries, _ = store.audit.listed(action_types=[REFIT_ACTION], limit=LOOKS_READ)
    return [
        e.evidence
        for e in entries
        if (e.evidence or {}).get("domain") == collection and e.pipeline_version_before == version
    ]


def last_fit(store: Store, collection: str, version: str) -> int | None:
    """How many failures the newest fit for `collection` under `version` was made on (None: none
    yet). A fit per index generation would otherwise repeat on the same pool after every re-chunk."""
    looks = _looks(store, collection, version)
    return int(looks[0]["items"]) if looks else None


def spent_before(store: Store, collection: str, version: str) -> float:
    """What the earlier looks at this version's pool spent of `BUDGET` (an entry from before the
    budget counts its whole level)."""
    return sum(float(ev.get("spent", ev.get("p_family_level", BUDGET))) for ev in _looks(store, collection, version))


@dataclass(frozen=True)
class SizeTrial:
    size: int
    overlap: int
    delta: Delta
    """The gain with its Bonferroni-level interval and its own (unadjusted) one-sided p."""
    p_family: float
    """One-sided p adjusted for every size the fit tried (`stats.sign_flip_max_gain_p`)."""
    level: float = BUDGET
    """What `p_family` must reach at this look: its allowance less what earlier looks spent."""

    @property
    def qualifies(self) -> bool:
        return self.delta.n > 1 and self.delta.lo > 0.0 and self.p_family <= self.level

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "overlap": self.overlap,
            "gain": self.delta.to_json(),
            "p_family": round(self.p_family, 6),
            "qualifies": self.qualifies,
        }


@dataclass(frozen=True)
class SizeFit:
    """One look at the pool: every size's trial, the level it was held to and what it spent."""

    trials: tuple[SizeTrial, ...]
    level: float
    differing: int = FULL_INFORMATION
    full_information: int = FULL_INFORMATION
    spent_before: float = 0.0
    spent: float = 0.0
    """The look's attained size at `level` (`stats.sign_flip_max_gain_test`): what it adds to the
    version's spending whether or not a size qualified."""

    @property
    def chosen(self) -> SizeTrial | None:
        good = [t for t in self.trials if t.qualifies]
        return max(good, key=lambda t: (round(t.delta.diff, 9), -t.size)) if good else None

    def to_json(self) -> dict[str, Any]:
        """The fit's decision as its audit entry records it (the admin timeline draws it as a table)."""
        best = self.chosen
        return {
            "alpha": ALPHA / max(1, len(self.trials)),
            "p_family_level": round(self.level, 6),
            "budget": BUDGET,
            "differing": self.differing,
            "full_information": self.full_information,
            "allowance": round(allowance(self.differing, self.full_information), 6),
            "spent_before": round(self.spent_before, 6),
            "spent": math.ceil(self.spent * 1e6) / 1e6,  # rounded up: the next look must not overspend
            "trials": [t.to_json() for t in self.trials],
            "chosen_size": best.size if best else None,
        }


def differing(before: Sequence[float], afters: Sequence[Sequence[float]]) -> int:
    """Items whose score differs from `before` at some size: the sign test's information."""
    if not len(afters):
        return 0
    a = np.asarray(before, dtype=float)
    return int(np.any(np.abs(np.asarray(afters, dtype=float) - a) > 1e-12, axis=0).sum())


def allowance(items: int, full: int = FULL_INFORMATION) -> float:
    """How much of `BUDGET` the looks may have spent by a look on `items` differing items: in
    proportion to them, all of it from `full` on. Spending all that is left at the first
    look that could reject would let two or three early looks on 6-7 differing items use it up,
    leaving the later, better informed looks nothing."""
    return BUDGET * min(1.0, items / max(1, full))


def fit_sizes(
    sizes: Sequence[tuple[int, int]],
    before: Sequence[float],
    afters: Sequence[Sequence[float]],
    *,
    spent_before: float = 0.0,
    full_information: int = FULL_INFORMATION,
    resamples: int = 1000,
    seed: int = DEFAULT_SEED,
) -> SizeFit:
    """Each size's gain over the serving index: its interval at the Bonferroni level for the sizes
    tried and its family-wise one-sided p (max statistic over the sizes), held to what is left of
    `BUDGET` after `spent_before`."""
    items = differing(before, afters)
    level = max(0.0, allowance(items, full_information) - spent_before)
    alpha = ALPHA / max(1, len(sizes))
    family, spent = sign_flip_max_gain_test(before, afters, level, seed=seed) if len(afters) else ([], 0.0)
    trials = tuple(
        SizeTrial(size, overlap, delta(before, after, resamples=resamples, seed=seed, alpha=alpha), p, level)
        for (size, overlap), after, p in zip(sizes, afters, family, strict=True)
    )
    return SizeFit(trials, level, items, full_information, spent_before, spent)


class ChunkingBufferAction(Remediation[ChunkingPayload]):
    kind: ClassVar[ActionKind] = ActionKind.CHUNKING_BUFFER
    effect: ClassVar[Effect] = Effect.CANDIDATE
    cost: ClassVar[float] = 5.0
    payload_type: ClassVar[type[BaseModel]] = ChunkingPayload

    def buffer(self, ctx: RemediationContext) -> list[ChunkingItem]:
        seen: set[tuple[str, str]] = set()
        out = []
        pool = pooled_items(ctx.store, self.payload.collection, ctx.config.version_id)
        for it in [*self.payload.items, *items_of(ctx.store, self.spec.answer_ids), *pool]:
            if (it.question, it.sentence) not in seen:
                seen.add((it.question, it.sentence))
                out.append(it)
        return out

    def ready(self, ctx: RemediationContext) -> str | None:
        items = self.buffer(ctx)
        n, size = len({it.doc_id for it in items}), ctx.settings.chunking_buffer_size
        if n < size:
            return f"chunking buffer {n}/{size} documents"
        last = last_fit(ctx.store, self.payload.collection, ctx.config.version_id)
        if last is not None and last >= len(items):
            return f"no new chunking failure since the last fit on {last}"
        if spent_before(ctx.store, self.payload.collection, ctx.config.version_id) >= BUDGET - 1e-9:
            return "the error budget of this version's pool is spent"
        return None

    def sizes(self, ctx: RemediationContext) -> list[tuple[int, int]]:
        s = ctx.settings
        size, out = ctx.config.chunking.size, []
        for _ in range(s.chunking_steps):
            size = max(size + 1, round(size * s.rechunk_growth))
            out.append((size, min(size - 1, round(size * s.rechunk_overlap_share))))
        return out

    def scores(self, ctx: RemediationContext, items: Sequence[ChunkingItem], index: Collection | None) -> list[float]:
        p = self.payload
        retriever = serving_retriever(ctx, p.collection, index)
        k = ctx.config.retrieval.k
        return [
            score_hits(
                retriever.retrieve(it.question, k),
                QueryGroup(collection=p.collection, questions=(it.question,), passages=(it.sentence,)),
            )
            for it in items
        ]

    def focus(self, ctx: RemediationContext, items: Sequence[ChunkingItem]) -> set[str]:
        """The documents a fit re-chunks: the buffered ones and those of every question's top
        `FOCUS_DEPTH` x k hits on the serving index."""
        retriever = serving_retriever(ctx, self.payload.collection)
        depth = FOCUS_DEPTH * ctx.config.retrieval.k
        out = {it.doc_id for it in items}
        for it in items:
            out.update(h.doc_id for h in retriever.retrieve(it.question, depth))
        return out

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        p = self.payload
        items = self.buffer(ctx)
        serving = ctx.collections(p.collection)
        primary = serving.primary if isinstance(serving, IndexVariant) else serving  # where the sources are
        focus = self.focus(ctx, items)
        sizes = self.sizes(ctx)

        def at(cfg: PipelineConfig) -> list[float]:
            # every size, the serving one too, on the focus without its per-document re-chunks: a
            # re-chunk that fixed a pooled failure fixed that document only, and would otherwise hide
            # from the fit what the size does for the documents no failure has named yet
            preview = preview_variant(primary, cfg, focus=focus, rest=serving, document_overrides=False)
            return self.scores(ctx, items, preview)

        before = at(ctx.config)
        afters = [at(ctx.config.with_overrides(chunking={"size": s, "overlap": o})) for s, o in sizes]
        fit = fit_sizes(
            sizes,
            before,
            afters,
            spent_before=spent_before(ctx.store, p.collection, ctx.config.version_id),
            resamples=ctx.settings.resamples,
            seed=ctx.settings.seed,
        )
        best = fit.chosen
        candidate = None
        if best is not None:
            cfg = ctx.config.with_overrides(chunking={"size": best.size, "overlap": best.overlap})
            cfg = cfg.model_copy(update={"name": f"{ctx.config.name}+chunking-{best.size}-{p.collection}"})
            if ctx.store.pipelines.get(cfg.version_id) is None:
                # a new candidate's index is built now, from the vectors the preview just embedded
                # (the embedding cache), so its golden check and first request do not wait; and
                # before it is registered, since the auto-experiment step may pick it up at once
                IndexVariant(primary, cfg).sync()
            candidate = register_candidate(
                ctx,
                cfg,
                self.kind,
                f"chunk size {ctx.config.chunking.size} -> {best.size} "
                f"on {len(items)} chunking failures of {p.collection}",
            )
        note = AuditNote(
            action_type=REFIT_ACTION,
            evidence={
                "domain": p.collection,
                "items": len(items),
                "documents": len({it.doc_id for it in items}),
                "answers": len(self.spec.answer_ids),
                "focus": {"documents": len(focus), "of": len({c.doc_id for c in serving.load().chunks})},
                "serving": {"size": ctx.config.chunking.size, "overlap": ctx.config.chunking.overlap},
                **fit.to_json(),
                "candidate_version": candidate,
            },
            pipeline_version_before=ctx.config.version_id,
            pipeline_version_after=candidate,
        )
        verdict = (
            f"candidate {candidate} (size {best.size})" if best and candidate else "no candidate (no size qualified)"
        )
        return AppliedChange(
            kind=self.kind,
            effect=Effect.CANDIDATE if candidate else Effect.RECORD,
            summary=f"chunking fit on {len(items)} failures: {verdict}",
            candidate_version=candidate,
            notes=(note,),
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        return None  # a candidate is never serving; the experiments' path retires it
