"""Ranking buffer (ranking failures): (query, oracle chunk, actual rank, score) tuples, and at the
buffer size a refit of the retrieval mode (hybrid / dense / BM25), the fusion weight (and the rerank
weight when reranking is on) and the top k (`topk`) that becomes a *candidate* pipeline version,
never the serving one.

The buffer is the action itself: the queue keeps one ranking action per collection and pipeline
version, and every further ranking failure adds its answer to it while it is proposed; the tuples
are read from those answers' diagnoses (their ranking evidence and question), plus any the payload
carries. The action waits (stays proposed) until the buffer holds `ranking_buffer_size` tuples.
The refit is a grid search maximising the oracle chunks' mean reciprocal rank (to `ranking_depth`)
per distinct query. Its improvement is judged out of sample: queries are split in two folds, the
weight is chosen on one and the per-query gain over the serving config measured on the other (and
vice versa), and a candidate is registered only when the bootstrap interval of that held-out gain
is above zero. The decision, either way, is its own audit entry (`ranking_refit`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from ragloop.config.pipeline import RetrievalConfig
from ragloop.evaluation.stats import ONE_SIDED, bootstrap_ci, sign_flip_gain_p
from ragloop.improve.remediation.base import (
    AppliedChange,
    AuditNote,
    Effect,
    Remediation,
    RemediationContext,
    register_candidate,
)
from ragloop.improve.types import ActionKind
from ragloop.retrieval.retriever import Retriever
from ragloop.store import Store

REFIT_ACTION = "ranking_refit"
DENSE_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
RERANK_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5)


class RankingTuple(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    query: str
    chunk_id: str
    rank: int | None = None
    """Its rank in the served retrieval (None: below the depth read)."""
    score: float = 0.0
    """The oracle's score of the chunk against the ideal answer."""


class RankingPayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    collection: str
    tuples: tuple[RankingTuple, ...] = ()


def audit_action_type(kind: ActionKind) -> str:
    """The audit log's action_type of an applied remediation."""
    return f"remediation:{kind.value}"


def tuples_of(store: Store, answer_ids: Sequence[str]) -> list[RankingTuple]:
    """The ranking tuples of the answers' completed diagnoses (ranking evidence only)."""
    out: list[RankingTuple] = []
    for answer_id in answer_ids:
        record = store.diagnoses.get(answer_id)
        evidence = (record.evidence or {}) if record is not None else {}
        if record is None or evidence.get("kind") != "ranking":
            continue
        question = str((record.diagnosis_input or {}).get("question") or "")
        if not question:
            query = store.queries.query_for_answer(answer_id)
            question = query.question_text if query is not None else ""
        for m in evidence.get("missed", ()):
            if question:
                out.append(
                    RankingTuple(
                        query=question, chunk_id=m["chunk_id"], rank=m.get("rank"), score=m.get("oracle_score", 0.0)
                    )
                )
    return out


@dataclass(frozen=True)
class FusionFit:
    mode: str
    dense_weight: float
    rerank_weight: float | None
    baseline_mrr: float
    fitted_mrr: float
    held_out_gain: float
    lo: float
    hi: float
    queries: int
    grid: list[dict[str, Any]]
    p: float
    """One-sided p of the held-out gain (`stats.sign_flip_gain_p`): a handful of queries is what
    these fits see, where the percentile interval alone is anti-conservative."""

    @property
    def improves(self) -> bool:
        return self.queries > 1 and self.lo > 0.0 and self.p <= ONE_SIDED

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "dense_weight": self.dense_weight,
            "rerank_weight": self.rerank_weight,
            "baseline_mrr": round(self.baseline_mrr, 6),
            "fitted_mrr": round(self.fitted_mrr, 6),
            "held_out_gain": {
                "value": round(self.held_out_gain, 6),
                "lo": round(self.lo, 6),
                "hi": round(self.hi, 6),
                "p": round(self.p, 6),
            },
            "queries": self.queries,
            "grid": self.grid,
            "improves": self.improves,
            "p_level": ONE_SIDED,
        }


MODES = ("hybrid", "dense", "bm25")


def variants(base: RetrievalConfig) -> list[tuple[str, float, float | None, RetrievalConfig]]:
    """The grid: weighted fusion at each dense weight (x each rerank weight when reranking is on),
    and dense-only and BM25-only retrieval (where fusion has nothing to weigh), as (mode, dense
    weight, rerank weight, config)."""
    out = []
    rerank = RERANK_WEIGHTS if base.rerank.enabled else (None,)
    for mode in MODES:
        for w in DENSE_WEIGHTS if mode == "hybrid" else (base.fusion.dense_weight,):
            for rw in rerank:
                cfg = base.model_copy(
                    update={
                        "mode": mode,
                        "fusion": base.fusion.model_copy(update={"method": "weighted", "dense_weight": w}),
                        "use_expansion_cache": False,
                        **({"rerank": base.rerank.model_copy(update={"weight": rw})} if rw is not None else {}),
                    }
                )
                out.append((mode, w, rw, cfg))
    return out


RankOf = Callable[[RetrievalConfig, str, Sequence[str]], list[float]]


def fit_fusion(
    tuples: Sequence[RankingTuple], base: RetrievalConfig, rr_of: RankOf, *, resamples: int = 1000, seed: int = 20240601
) -> FusionFit:
    """`rr_of(config, query, chunk_ids)`: the reciprocal rank of each chunk under `config`."""
    by_query: dict[str, list[str]] = defaultdict(list)
    for t in tuples:
        if t.chunk_id not in by_query[t.query]:
            by_query[t.query].append(t.chunk_id)
    queries = sorted(by_query)
    grid = variants(base)
    serving = base.model_copy(update={"use_expansion_cache": False})
    configs = [serving] + [cfg for *_, cfg in grid]
    rr = np.array([[float(np.mean(rr_of(cfg, q, by_query[q]))) for q in queries] for cfg in configs])
    base_rr, grid_rr = rr[0], rr[1:]
    fold = np.arange(len(queries)) % 2
    held_out = np.zeros(len(queries))
    for f in (0, 1):
        train, test = fold != f, fold == f
        if not test.any():
            continue
        best = int(np.argmax(grid_rr[:, train].mean(axis=1))) if train.any() else 0
        held_out[test] = grid_rr[best, test] - base_rr[test]
    est = bootstrap_ci(held_out.tolist(), resamples=resamples, seed=seed)
    best_all = int(np.argmax(grid_rr.mean(axis=1)))
    mode, w, rw, _ = grid[best_all]
    table = [
        {
            "mode": gm,
            "dense_weight": gw,
            **({"rerank_weight": grw} if grw is not None else {}),
            "mrr": round(float(grid_rr[i].mean()), 6),
        }
        for i, (gm, gw, grw, _) in enumerate(grid)
    ]
    return FusionFit(
        mode=mode,
        dense_weight=w,
        rerank_weight=rw,
        baseline_mrr=float(base_rr.mean()),
        fitted_mrr=float(grid_rr[best_all].mean()),
        held_out_gain=est.value,
        lo=est.lo,
        hi=est.hi,
        queries=len(queries),
        grid=table,
        p=sign_flip_gain_p([0.0] * len(held_out), held_out.tolist(), seed=seed),
    )


def retriever_rr(ctx: RemediationContext, collection: str, depth: int) -> RankOf:
    coll = ctx.collections(collection)
    shared = Retriever(coll, ctx.config.retrieval).embedder
    cache: dict[tuple[str, str], Retriever] = {}

    def rr_of(cfg: RetrievalConfig, query: str, chunk_ids: Sequence[str]) -> list[float]:
        key = (cfg.model_dump_json(), collection)
        if key not in cache:
            cache[key] = Retriever(coll, cfg, embedder=shared)
        ranks = {h.chunk_id: h.rank for h in cache[key].retrieve(query, depth)}
        return [1.0 / ranks[c] if c in ranks else 0.0 for c in chunk_ids]

    return rr_of


class RankingBufferAction(Remediation[RankingPayload]):
    kind: ClassVar[ActionKind] = ActionKind.RANKING_BUFFER
    effect: ClassVar[Effect] = Effect.CANDIDATE
    cost: ClassVar[float] = 0.5
    payload_type: ClassVar[type[BaseModel]] = RankingPayload

    def buffer(self, ctx: RemediationContext) -> list[RankingTuple]:
        seen: set[tuple[str, str]] = set()
        out = []
        for t in [*self.payload.tuples, *tuples_of(ctx.store, self.spec.answer_ids)]:
            if (t.query, t.chunk_id) not in seen:
                seen.add((t.query, t.chunk_id))
                out.append(t)
        return out

    def ready(self, ctx: RemediationContext) -> str | None:
        n, size = len(self.buffer(ctx)), ctx.settings.ranking_buffer_size
        return None if n >= size else f"ranking buffer {n}/{size}"

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        from ragloop.improve.remediation.topk import fit_top_k  # it reads this module's types

        p = self.payload
        buffer = self.buffer(ctx)
        rr_of = retriever_rr(ctx, p.collection, ctx.settings.ranking_depth)
        kw = {"resamples": ctx.settings.resamples, "seed": ctx.settings.seed}
        fit = fit_fusion(buffer, ctx.config.retrieval, rr_of, **kw)
        over: dict[str, object] = {}
        if fit.improves:
            over["mode"] = fit.mode
            if fit.mode == "hybrid":
                over["fusion"] = {"method": "weighted", "dense_weight": fit.dense_weight}
            if fit.rerank_weight is not None:
                over["rerank"] = {"weight": fit.rerank_weight}
        chosen = ctx.config.with_overrides(retrieval=over).retrieval if over else ctx.config.retrieval
        k_fit = fit_top_k(buffer, chosen, rr_of, **kw)
        if k_fit.improves:
            over["k"] = k_fit.fitted
        candidate = None
        if over:
            cfg = ctx.config.with_overrides(retrieval=over)
            changed = "+".join(sorted(over))
            cfg = cfg.model_copy(update={"name": f"{ctx.config.name}+retrieval-refit-{p.collection}"})
            candidate = register_candidate(
                ctx, cfg, self.kind, f"retrieval refit ({changed}) on {fit.queries} ranking failures of {p.collection}"
            )
        note = AuditNote(
            action_type=REFIT_ACTION,
            evidence={
                "domain": p.collection,
                "tuples": len(buffer),
                "answers": len(self.spec.answer_ids),
                "fit": fit.to_json(),
                "top_k": k_fit.to_json(),
                "overrides": over,
                "candidate_version": candidate,
            },
            pipeline_version_before=ctx.config.version_id,
            pipeline_version_after=candidate,
        )
        verdict = f"candidate {candidate} ({over})" if candidate else "no candidate (no held-out gain shown)"
        return AppliedChange(
            kind=self.kind,
            effect=Effect.CANDIDATE if candidate else Effect.RECORD,
            summary=f"refit on {len(buffer)} tuples ({fit.queries} queries): {verdict}",
            candidate_version=candidate,
            notes=(note,),
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        return None  # a candidate is never serving; the experiments' path retires it
