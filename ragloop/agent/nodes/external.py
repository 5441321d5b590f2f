"""external_search: the CRAG fallback. Results are data to refine like any chunk; a failure
(timeout, open circuit, bad response) degrades to internal-only, with the reason traced."""

from __future__ import annotations

from ragloop.agent.details import ExternalSearchDetail
from ragloop.agent.nodes.retrieve import current_query
from ragloop.agent.nodes.rewrite import keyword_query
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.search import SearchError
from ragloop.agent.state import AgentState
from ragloop.agent.types import RetrievedChunk


async def external_search(state: AgentState, rt: Runtime) -> NodeResult:
    if rt.search is None:
        return NodeResult({"external_tried": True, "external_note": "no external search configured"}, "skipped")
    query = current_query(state)
    if query == state.get("question"):
        query = keyword_query(query) or query
    try:
        results = await rt.search.search(query, k=rt.config.retrieval.k)
    except SearchError as exc:
        note = f"external search failed ({type(exc).__name__}: {exc}); continuing with internal results only"
        return NodeResult(
            {"external_tried": True, "external_note": note},
            "degraded",
            ExternalSearchDetail(query=query, error=str(exc)),
        )
    chunks = [
        RetrievedChunk(
            chunk_id=r.chunk_id,
            doc_id=r.doc_id or r.url,
            title=r.title,
            text=r.snippet,
            source="external",
            query=query,
            retrieval_score=float(r.score or 0.0),
        )
        for r in results
        if r.snippet.strip()
    ]
    return NodeResult(
        update={
            "retrieved": chunks,
            "external_tried": True,
            "external_note": f"{len(chunks)} external results",
        },
        decision=f"{len(chunks)} results from {rt.search.name}",
        detail=ExternalSearchDetail(query=query, chunk_ids=[c.chunk_id for c in chunks], urls=[r.url for r in results]),
    )
