"""Server-Sent Events for `/v1/query?stream=true`.

The stream carries what the graph does and, only once the answer has passed validation, the answer:

    event: node     data: {"node": "retrieve", "decision": "...", "latency_ms": 3.1}   (one per step)
    event: token    data: {"text": "The Normans "}                                    (the validated answer, in pieces)
    event: answer   data: {QueryPublic}                                               (the complete response)
    event: error    data: {"status": 503, "detail": "..."}                            (instead of an answer)

No draft text is ever sent: drafts live inside the graph until the citation validator accepts them.
Nothing that carries the `answer_id` (the `answer` event; the tokens come with it) is sent before
the answer and its tier-1 job are committed (`answering.answer_events`), so a client that saw the
id can always read the answer back, even after a crash. While the write waits (a competing
writer's lock, a retry) the stream is quiet; when it fails or times out the stream ends with
`error` and status 503 in place of the answer.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi import HTTPException
from fastapi.responses import StreamingResponse

from ragloop.agent.answer import NodeEvent
from ragloop.service.answering import ServiceEvent, Turn, answer_events
from ragloop.service.auth import Caller
from ragloop.service.state import ServiceState

log = logging.getLogger("ragloop.service")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_PIECE = re.compile(r"\S+\s*")


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n".encode()


def pieces(text: str, words: int = 4) -> list[str]:
    """The answer in pieces of a few words (whitespace kept, so the pieces join to the text)."""
    parts = _PIECE.findall(text)
    lead = text[: len(text) - len(text.lstrip())]
    out = ["".join(parts[i : i + words]) for i in range(0, len(parts), words)]
    if out and lead:
        out[0] = lead + out[0]
    return out or ([text] if text else [])


async def query_stream(svc: ServiceState, caller: Caller, turn: Turn) -> StreamingResponse:
    events = answer_events(svc, caller, turn)
    # the first event is awaited here, so a missing collection is a plain 404, not a stream
    first = await anext(events)

    async def body() -> AsyncIterator[bytes]:
        ev: ServiceEvent | None = first
        try:
            while ev is not None:
                if isinstance(ev, NodeEvent):
                    yield sse("node", ev.model_dump(mode="json"))
                else:
                    public = ev.public
                    for piece in pieces(public.answer):
                        yield sse("token", {"text": piece})
                    yield sse("answer", public.model_dump(mode="json"))
                ev = await anext(events, None)
        except HTTPException as exc:
            yield sse("error", {"status": exc.status_code, "detail": exc.detail})
        except Exception as exc:
            log.exception("streaming an answer failed")
            yield sse("error", {"status": 500, "detail": f"internal error ({type(exc).__name__})"})

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)
