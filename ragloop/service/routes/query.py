"""`POST /v1/query`: one question, answered by the active pipeline (JSON, or Server-Sent Events)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ragloop.service.answering import Turn, answer_once
from ragloop.service.deps import CallerDep, ServiceDep
from ragloop.service.schemas import QueryCreate, QueryPublic
from ragloop.service.streaming import query_stream

router = APIRouter(tags=["query"])

STREAM_DOC = (
    "With `stream=true`: `text/event-stream` with `node` events (one per graph step), then `token` events "
    "(the validated answer in pieces) and one `answer` event carrying the full response; `error` on failure."
)


@router.post(
    "/v1/query",
    response_model=QueryPublic,
    summary="Answer a question",
    responses={
        200: {"content": {"text/event-stream": {}}, "description": f"The answer. {STREAM_DOC}"},
        404: {"description": "Unknown collection."},
        503: {"description": "The collection has no index, or no pipeline can answer."},
    },
)
async def query(
    body: QueryCreate,
    svc: ServiceDep,
    caller: CallerDep,
    stream: Annotated[bool, Query(description="Stream Server-Sent Events instead of one JSON response.")] = False,
) -> Any:
    """The answer is stored and its evaluation queued after the response is ready, never before."""
    turn = Turn(
        question=body.question,
        session_id=body.session_id,
        collection=body.collection or svc.config.collection,
        top_k=body.top_k,
    )
    if stream or body.stream:
        return await query_stream(svc, caller, turn)
    _, public = await answer_once(svc, caller, turn)
    return public
