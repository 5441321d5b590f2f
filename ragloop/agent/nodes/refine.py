"""refine: CRAG knowledge refinement (decompose -> filter -> recombine).

Usable chunks are cut into strips (sentences; code blocks and list items whole), all strips are
scored in one batched call, and those above the threshold are recombined chunk by chunk in
document order. Each strip keeps its chunk id and offsets, so citations stay exact.
"""

from __future__ import annotations

from ragloop.agent.nodes.grade import usable
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.state import AgentState
from ragloop.agent.types import KeptStrip
from ragloop.text.sentences import split_strips

MAX_STRIPS = 40


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
    judged = await rt.refine_scorer.relevance(question, [s.text for s in candidates]) if candidates else []
    scored = [s.model_copy(update={"score": float(j.p)}) for s, j in zip(candidates, judged, strict=True)]
    passing = [s for s in scored if s.score >= cfg.refine_threshold]
    if not passing and chunks and (chunks[0].grade or 0.0) >= cfg.tau_upper:
        # a chunk graded CORRECT keeps at least its best strip: the grader has read it as relevant
        best = max((s for s in scored if s.chunk_id == chunks[0].chunk_id), key=lambda s: s.score, default=None)
        passing = [best] if best else []
    passing = sorted(passing, key=lambda s: -s.score)[:MAX_STRIPS]
    order = {c.chunk_id: i for i, c in enumerate(chunks)}
    kept = sorted(passing, key=lambda s: (order[s.chunk_id], s.start))
    return NodeResult(
        update={"kept": kept},
        decision=f"kept {len(kept)} of {len(scored)} strips from {len(chunks)} chunks",
        detail={
            "threshold": cfg.refine_threshold,
            "kept": [(s.chunk_id, s.start, s.end, round(s.score, 4)) for s in kept],
            "scorer": rt.refine_scorer.name,
        },
    )
