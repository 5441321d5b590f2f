"""Deterministic chat models shipped in the package, and the switch that forbids real calls.

`TestModel` plays a script of replies (then a default, schema-valid when a schema was asked
for) and records every request; `FunctionModel` answers with a function of the request. Both
go through the same structured-output path as real backends, so repair and failure can be
tested without weights. Unit tests call `block_real_calls()` (or set `RAGLOOP_BLOCK_REAL_CALLS=1`)
so that any real backend raises `RealCallsBlockedError` instead of reaching a network or a model.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from ragloop.models.chat import structured
from ragloop.models.chat.base import (
    ChatModel,
    ChatRequest,
    ChatResponse,
    TokenLogprob,
    TopLogprob,
    Usage,
    estimate_tokens,
)
from ragloop.models.errors import RealCallsBlockedError

ALLOW_REAL_CALLS: bool = os.environ.get("RAGLOOP_BLOCK_REAL_CALLS", "") not in ("1", "true", "yes")


def ensure_real_calls_allowed(model: str) -> None:
    """Called by every real backend before it does any I/O."""
    if not ALLOW_REAL_CALLS:
        raise RealCallsBlockedError(
            f"real model calls are blocked (ragloop.models.chat.testing.ALLOW_REAL_CALLS is False): {model}"
        )


@contextmanager
def real_calls(allowed: bool) -> Iterator[None]:
    """Set `ALLOW_REAL_CALLS` for the duration of a `with` block, then restore it."""
    global ALLOW_REAL_CALLS
    before = ALLOW_REAL_CALLS
    ALLOW_REAL_CALLS = allowed
    try:
        yield
    finally:
        ALLOW_REAL_CALLS = before


def block_real_calls() -> None:
    """Forbid real backends for the rest of the process (call it from a test conftest)."""
    global ALLOW_REAL_CALLS
    ALLOW_REAL_CALLS = False


def sample_from_schema(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A minimal instance of a JSON schema (required properties only), deterministic."""
    root = root if root is not None else schema
    if "$ref" in schema:
        ref = schema["$ref"].split("/")[-1]
        return sample_from_schema(root.get("$defs", {})[ref], root)
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return sample_from_schema(options[0], root)
    kind = schema.get("type", "object")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: sample_from_schema(props[k], root) for k in schema.get("required", []) if k in props}
    if kind == "array":
        n = schema.get("minItems", 0)
        return [sample_from_schema(schema.get("items", {}), root) for _ in range(n)]
    simple: dict[str, Any] = {"string": "a", "integer": 0, "number": 0.0, "boolean": False, "null": None}
    return simple.get(kind)


Scripted = str | BaseModel | ChatResponse | Exception


class TestModel(ChatModel):
    """Replies from a script, in order; then `default_text` (or a schema-valid sample).

    A script item may be a string (the raw reply text), a pydantic instance (its JSON), a whole
    `ChatResponse`, or an exception to raise. `requests` records every request seen, including
    structured-output repair turns. `first_token_logprobs` answers requests for log-probabilities.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        script: Sequence[Scripted] = (),
        *,
        name: str = "test:scripted",
        default_text: str = "ok",
        first_token_logprobs: dict[str, float] | None = None,
        latency_ms: float | None = None,
    ) -> None:
        self.name = name
        self.script = list(script)
        self.default_text = default_text
        self.first_token_logprobs = first_token_logprobs
        self.latency_ms = latency_ms
        self.requests: list[ChatRequest] = []

    def _next_text(self, req: ChatRequest) -> str | ChatResponse:
        if self.script:
            item = self.script.pop(0)
            if isinstance(item, Exception):
                raise item
            if isinstance(item, BaseModel) and not isinstance(item, ChatResponse):
                return item.model_dump_json()
            return item
        schema = req.json_schema()
        return json.dumps(sample_from_schema(schema)) if schema is not None else self.default_text

    async def _raw(self, req: ChatRequest) -> ChatResponse:
        start = time.perf_counter()
        self.requests.append(req)
        out = self._next_text(req)
        if isinstance(out, ChatResponse):
            return out
        logprobs = None
        if req.top_logprobs and self.first_token_logprobs:
            alts = sorted(self.first_token_logprobs.items(), key=lambda kv: -kv[1])[: req.top_logprobs]
            top = [TopLogprob(token=t, logprob=lp) for t, lp in alts]
            logprobs = [TokenLogprob(token=alts[0][0], logprob=alts[0][1], top_logprobs=top)]
        elapsed = (time.perf_counter() - start) * 1000
        return ChatResponse(
            text=out,
            model=self.name,
            usage=Usage(prompt_tokens=estimate_tokens(req.prompt_text()), completion_tokens=estimate_tokens(out)),
            latency_ms=self.latency_ms if self.latency_ms is not None else elapsed,
            logprobs=logprobs,
            finish_reason="stop",
        )

    async def request(self, req: ChatRequest) -> ChatResponse:
        return await structured.complete(self._raw, req, self.name)

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        resp = await self._raw(req)
        words = resp.text.split(" ")
        for i, w in enumerate(words):
            yield w if i == len(words) - 1 else w + " "


AnswerFn = Callable[[ChatRequest], "str | ChatResponse | Awaitable[str | ChatResponse]"]


class FunctionModel(ChatModel):
    """Replies with `fn(request)`: a string or a `ChatResponse`, sync or async."""

    def __init__(
        self,
        fn: AnswerFn,
        *,
        name: str = "test:function",
        stream_fn: Callable[[ChatRequest], AsyncIterator[str]] | None = None,
    ) -> None:
        self.name = name
        self.fn = fn
        self.stream_fn = stream_fn

    async def _raw(self, req: ChatRequest) -> ChatResponse:
        start = time.perf_counter()
        out = self.fn(req)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, ChatResponse):
            return out
        return ChatResponse(
            text=out,
            model=self.name,
            usage=Usage(prompt_tokens=estimate_tokens(req.prompt_text()), completion_tokens=estimate_tokens(out)),
            latency_ms=(time.perf_counter() - start) * 1000,
            finish_reason="stop",
        )

    async def request(self, req: ChatRequest) -> ChatResponse:
        return await structured.complete(self._raw, req, self.name)

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        if self.stream_fn is None:
            yield (await self._raw(req)).text
            return
        async for piece in self.stream_fn(req):
            yield piece
