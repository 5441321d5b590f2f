"""OpenAI-compatible `POST /v1/chat/completions` and `GET /v1/models`, so any OpenAI client or chat UI
can talk to ragloop.

- Models: `ragloop` answers from the default collection, `ragloop:<collection>` from another.
- The question is the last user message. A conversation continues in the graph's memory when the
  request names it (`session_id` in the body, e.g. `extra_body={"session_id": ...}` with the SDK,
  or the standard `user` field); otherwise the call is stateless and a follow-up is made
  standalone from the earlier user messages in the request.
- Citations travel twice: in the message text (inline [n] plus a "Sources:" list) and as an extra
  `citations` field on the completion (and on the last stream chunk), with ragloop's `answer_id`.
- Sampling parameters (temperature, max_tokens, ...) are accepted and ignored: answers come from the
  pipeline. Errors use OpenAI's shape, `{"error": {"message", "type", "code"}}`.
- `stream=true` sends `chat.completion.chunk` events and `data: [DONE]`; the text is only streamed
  once the graph has validated it and the answer is stored (the chunks carry the `answer_id`).
- An answer that cannot be stored within `answer_write_timeout_s` is a 503 (an error chunk on a
  stream), never a completion whose `answer_id` points at nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragloop.agent.nodes.condense import carry_forward, is_follow_up
from ragloop.models.chat import estimate_tokens
from ragloop.retrieval.collection import list_collections
from ragloop.service.answering import Answered, ServiceEvent, Turn, answer_events
from ragloop.service.deps import CallerDep, ServiceDep
from ragloop.service.schemas import (
    COLLECTION_PATTERN,
    SESSION_PATTERN,
    CitationPublic,
    QueryPublic,
    RequestModel,
    check_question,
)
from ragloop.service.streaming import SSE_HEADERS, pieces

router = APIRouter(tags=["openai"])
MODEL = "ragloop"


class ContentPart(RequestModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(RequestModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "\n".join(p.text or "" for p in self.content if p.type == "text")


class ChatCompletionCreate(RequestModel):
    """OpenAI's request body; unknown parameters are accepted and ignored (never stored). The declared
    fields follow the same rules as `/v1/query`: the input policy, strict types, a question with
    words, a session-id-shaped `user` and a collection-name-shaped model suffix."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(
        min_length=1, max_length=200, description="`ragloop` (the default collection) or `ragloop:<collection>`."
    )
    messages: list[ChatMessage] = Field(min_length=1, max_length=200)
    stream: bool = False
    user: str | None = Field(
        default=None, pattern=SESSION_PATTERN, description="OpenAI's end-user id; here a session id, as in `/v1/query`."
    )
    session_id: str | None = Field(default=None, pattern=SESSION_PATTERN, description="ragloop: keep memory here.")

    @field_validator("model")
    @classmethod
    def _collection_name(cls, model: str) -> str:
        """`ragloop:<collection>` must be a collection name (`ragloop:../../etc` is a 422); any other
        model name is left to `collection_of`, which answers OpenAI's 404 `model_not_found`."""
        if model.startswith(f"{MODEL}:") and not re.match(COLLECTION_PATTERN, model[len(MODEL) + 1 :]):
            raise ValueError(f"{model!r} does not name a collection: use '{MODEL}:<letters, digits, _ . ->'")
        return model

    @field_validator("messages")
    @classmethod
    def _has_question(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        users = user_texts(messages)
        if not users:
            raise ValueError("the messages contain no user message with text")
        check_question(users[-1])
        return messages


def user_texts(messages: list[ChatMessage]) -> list[str]:
    """The text of every user message that has some, in order; the last one is the question."""
    return [t for t in (m.text().strip() for m in messages if m.role == "user") if t]


class ChatChoiceMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatChoiceMessage
    finish_reason: Literal["stop"] = "stop"
    logprobs: None = None


class ChatUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class RagloopExtra(BaseModel):
    answer_id: str
    session_id: str
    refused: bool
    termination_reason: str
    confidence: float
    pipeline_version: str
    degraded: bool


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage
    citations: list[CitationPublic] = Field(description="ragloop: the sources behind the [n] markers.")
    ragloop: RagloopExtra


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "ragloop"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIError(HTTPException):
    """An HTTP error rendered in OpenAI's `{"error": {...}}` shape."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", code: str | None = None):
        super().__init__(status, message)
        self.type_ = type_
        self.code = code


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def collection_of(model: str, default: str) -> str:
    """The collection a model id names. A malformed `ragloop:<collection>` is a 422 (the model's
    validator); another model's name (`gpt-4o`) is OpenAI's 404 `model_not_found`."""
    name = model.strip()
    if name == MODEL:
        return default
    if name.startswith(f"{MODEL}:") and len(name) > len(MODEL) + 1:
        return name[len(MODEL) + 1 :]
    raise OpenAIError(
        404, f"the model {model!r} does not exist; use {MODEL!r} or '{MODEL}:<collection>'", code="model_not_found"
    )


def build_turn(body: ChatCompletionCreate, default_collection: str) -> Turn:
    collection = collection_of(body.model, default_collection)
    users = user_texts(body.messages)  # never empty: the model's validator
    question = users[-1][:4000]
    session = body.session_id or body.user
    if session:
        return Turn(question=question, session_id=session, collection=collection)
    earlier = users[:-1]
    if earlier and is_follow_up(question):
        question = carry_forward(question, earlier)
    first = hashlib.sha256(users[0].encode()).hexdigest()[:16]
    return Turn(question=question, session_id=f"chat-{first}", collection=collection, remember=False)


def message_text(public: QueryPublic) -> str:
    if not public.citations:
        return public.answer
    lines = [f"[{c.n}] {c.title or c.doc_id} ({c.doc_id})" for c in public.citations]
    return public.answer + "\n\nSources:\n" + "\n".join(lines)


def _extra(public: QueryPublic) -> RagloopExtra:
    return RagloopExtra(
        answer_id=public.answer_id,
        session_id=public.session_id,
        refused=public.refused,
        termination_reason=public.termination_reason,
        confidence=public.confidence,
        pipeline_version=public.pipeline_version,
        degraded=public.degraded,
    )


@router.get("/v1/models", response_model=ModelList, summary="Models (OpenAI-compatible)")
def list_models(svc: ServiceDep, caller: CallerDep) -> ModelList:
    """`ragloop` (the default collection) and `ragloop:<collection>`: every collection for an admin
    key; for a user key only the default one, since the collection list is inventory."""
    created = int(svc.started_at)
    collections = list_collections(svc.settings)
    if not caller.is_admin:
        collections = [c for c in collections if c == svc.config.collection]
    names = [MODEL] + [f"{MODEL}:{c}" for c in collections]
    return ModelList(data=[ModelCard(id=n, created=created) for n in names])


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    summary="Chat completion (OpenAI-compatible)",
    responses={200: {"content": {"text/event-stream": {}}, "description": "With `stream: true`: chunks, then [DONE]."}},
)
async def chat_completions(body: ChatCompletionCreate, svc: ServiceDep, caller: CallerDep) -> Any:
    turn = build_turn(body, svc.config.collection)
    prompt_tokens = sum(estimate_tokens(m.text()) for m in body.messages)
    if body.stream:
        return await _stream(body, svc, caller, turn)
    public: QueryPublic | None = None
    async for ev in answer_events(svc, caller, turn):
        if isinstance(ev, Answered):
            public = ev.public
    assert public is not None
    text = message_text(public)
    completion_tokens = estimate_tokens(text)
    return ChatCompletion(
        id=f"chatcmpl-{public.answer_id}",
        created=int(time.time()),
        model=body.model,
        choices=[ChatChoice(message=ChatChoiceMessage(content=text))],
        usage=ChatUsage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        ),
        citations=public.citations,
        ragloop=_extra(public),
    )


def _chunk(cid: str, created: int, model: str, delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
    data = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        **extra,
    }
    return f"data: {json.dumps(data, ensure_ascii=False, default=str)}\n\n".encode()


async def _stream(body: ChatCompletionCreate, svc: ServiceDep, caller: CallerDep, turn: Turn) -> StreamingResponse:
    events = answer_events(svc, caller, turn)
    first = await anext(events)  # errors before the first event are plain HTTP errors
    created = int(time.time())
    model = body.model

    async def gen() -> AsyncIterator[bytes]:
        ev: ServiceEvent | None = first
        cid = "chatcmpl-pending"
        sent_role = False
        try:
            while ev is not None:
                if isinstance(ev, Answered):
                    public: QueryPublic = ev.public
                    cid = f"chatcmpl-{public.answer_id}"
                    if not sent_role:
                        yield _chunk(cid, created, model, {"role": "assistant", "content": ""}, None)
                        sent_role = True
                    for piece in pieces(message_text(public)):
                        yield _chunk(cid, created, model, {"content": piece}, None)
                    yield _chunk(
                        cid,
                        created,
                        model,
                        {},
                        "stop",
                        citations=[c.model_dump() for c in public.citations],
                        ragloop=_extra(public).model_dump(),
                    )
                ev = await anext(events, None)
        except HTTPException as exc:
            payload = error_body(str(exc.detail), "server_error", str(exc.status_code))
            yield f"data: {json.dumps(payload)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(gen(), media_type="text/event-stream", headers=SSE_HEADERS)
