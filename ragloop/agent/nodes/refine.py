"""refine: CRAG knowledge refinement (decompose -> filter -> recombine).

Usable chunks are cut into strips (sentences; code blocks and list items whole), all strips are
scored in one batched call, and those above the threshold are recombined chunk by chunk in
document order. Each strip keeps its chunk id and offsets, so citations stay exact.
"""

from __future__ import annotations

from ragloop.agent.details import RefineDetail
from ragloop.agent.nodes.grade import usable
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.state import AgentState
from ragloop.agent.types import KeptStrip
from ragloop.models.scoring.base import Judgement, StripScorer
from ragloop.text.sentences import split_strips

MAX_STRIPS = 40


async def _score(rt: Runtime, question: str, chunk_texts: list[str], strips: list[KeptStrip]) -> list[Judgement]:
    """A strip-aware scorer (the reader) reads each strip with its neighbours and the rest of the
    batch; any other scorer judges strips one by one."""
    if not strips:
        return []
    scorer = rt.refine_scorer
    if isinstance(scorer, StripScorer):
        per_chunk = await scorer.score_strips(question, chunk_texts)
        return [j for chunk in per_chunk for j in chunk]
    return await scorer.relevance(question, [s.text for s in strips])


async def refine(state: AgentState, rt: Runtime) -> NodeResult:
    cfg = rt.config.agent
    question = state.get("standalone") or state["question"]
    chunks = usable(state.get("retrieved") or [], cfg.tau_lower)
    candidates: list[KeptStrip] = []
    for c in chunks:
        for s in split_strips(c.text):
            candidates.append(
                KeptStrip(text=s.text, chunk_id=c.chunk_id, doc_id=c.doc_id, start=s.start, end=s.end, kind=s.kind)
            )
    if not cfg.refine:  # ablation: whole chunks go forward as one strip each
        kept = [
            KeptStrip(
                text=c.text,
                chunk_id=c.chunk_id,
                doc_id=c.doc_id,
                start=0,
                end=len(c.text),
                score=c.grade or 0.0,
            )
            for c in chunks
        ]
        return NodeResult({"kept": kept}, decision=f"refinement off: {len(kept)} whole chunks")
    judged = await _score(rt, question, [c.text for c in chunks], candidates)
    scored = [s.model_copy(update={"score": float(j.p)}) for s, j in zip(candidates, judged, strict=True)]
    # the best few strips of graded-usable chunks always go forward: a sharp reader gives most
    # strips a tiny p, and the composer still needs candidates to choose from
    best_first = sorted(scored, key=lambda s: -s.score)
    passing = [s for i, s in enumerate(best_first) if s.score >= cfg.refine_threshold or i < cfg.refine_min_keep]
    passing = sorted(passing, key=lambda s: -s.score)[:MAX_STRIPS]
    order = {c.chunk_id: i for i, c in enumerate(chunks)}
    kept = sorted(passing, key=lambda s: (order[s.chunk_id], s.start))
    return NodeResult(
        update={"kept": kept},
        decision=f"kept {len(kept)} of {len(scored)} strips from {len(chunks)} chunks",
        detail=RefineDetail(
            threshold=cfg.refine_threshold,
            kept=[(s.chunk_id, s.start, s.end, round(s.score, 4)) for s in kept],
            scorer=rt.refine_scorer.name,
        ),
    )
