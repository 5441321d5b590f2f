"""retrieve: the knowledge-base retriever (which honours the query-expansion cache).

Runs the current query, or, in a critique cycle, every open deficiency's correction query;
new chunks join the context (merged by chunk id) and are graded next.
"""

from __future__ import annotations

from ragloop.agent.details import RetrieveDetail
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.state import AgentState
from ragloop.agent.types import RetrievedChunk
from ragloop.retrieval.types import Hit


def to_chunk(hit: Hit, query: str) -> RetrievedChunk:
    return RetrievedChunk(
        chunk_id=hit.chunk_id,
        doc_id=hit.doc_id,
        title=hit.title,
        heading_path=tuple(hit.heading_path),
        text=hit.text,
        query=query,
        retrieval_score=float(hit.score),
        rank=int(hit.rank),
        stage_scores=dict(hit.scores),
        stage_ranks=dict(hit.ranks),
    )


def current_query(state: AgentState) -> str:
    queries = state.get("queries") or []
    return queries[-1] if queries else state.get("standalone") or state["question"]


async def retrieve(state: AgentState, rt: Runtime) -> NodeResult:
    targeted = [d.correction_query for d in state.get("deficiencies") or [] if d.status == "open"]
    in_cycle = state.get("cycle", 0) > 0 and targeted
    queries = targeted if in_cycle else [current_query(state)]
    chunks: list[RetrievedChunk] = []
    seen: set[str] = set()
    for q in queries:
        for hit in await rt.retrieve(q, rt.config.retrieval.k):
            if hit.chunk_id not in seen:
                seen.add(hit.chunk_id)
                chunks.append(to_chunk(hit, q))
    same = bool(chunks) and {c.chunk_id for c in chunks} == set(state.get("last_batch") or [])
    known = {c.chunk_id for c in state.get("retrieved") or []}
    new = [c for c in chunks if c.chunk_id not in known]
    issued = [q for q in queries if q not in (state.get("queries") or [])]
    return NodeResult(
        update={"retrieved": chunks, "last_batch": [c.chunk_id for c in chunks], "queries": issued},
        decision=(
            "same chunk set as the previous retrieval: nothing new to grade"
            if same
            else f"{len(chunks)} chunks ({len(new)} new) for {len(queries)} quer{'y' if len(queries) == 1 else 'ies'}"
        ),
        detail=RetrieveDetail(
            queries=queries,
            chunk_ids=[c.chunk_id for c in chunks],
            targeted=bool(in_cycle),
            same=same,
        ),
    )
