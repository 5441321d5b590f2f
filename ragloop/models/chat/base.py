"""The chat-model interface: one small abstract class with one async request method.

Every backend (remote OpenAI-compatible, in-process llama.cpp, the test doubles) and every
wrapper (rate limit, retry, cache, log) is a `ChatModel`, so they compose freely. There is no
sync twin of the hierarchy: synchronous callers (the CLI) use `run_sync`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import hashlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant"]
T = TypeVar("T")


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Role
    content: str


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class TopLogprob(BaseModel):
    token: str
    logprob: float


class TokenLogprob(BaseModel):
    """One generated token, its log-probability and the top-k alternatives at that position."""

    token: str
    logprob: float
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatRequest(BaseModel):
    """Messages in, plus the knobs every backend understands.

    `output_type` asks for structured output: the backend constrains or instructs the model
    with its JSON schema and the response carries a validated instance in `parsed`.
    `top_logprobs` asks for the top-k alternatives of each generated token (P(yes) scoring).
    `run_id` only labels the call log; it is not part of the request's identity (`cache_key`).
    """

    model_config = ConfigDict(frozen=True)

    messages: tuple[Message, ...]
    output_type: type[BaseModel] | None = None
    max_tokens: int | None = None
    temperature: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    top_logprobs: int | None = None
    timeout_s: float | None = None
    run_id: str | None = None

    @classmethod
    def user(cls, prompt: str, *, system: str | None = None, **kwargs: Any) -> ChatRequest:
        msgs = [Message(role="system", content=system)] if system else []
        msgs.append(Message(role="user", content=prompt))
        return cls(messages=tuple(msgs), **kwargs)

    def json_schema(self) -> dict[str, Any] | None:
        return self.output_type.model_json_schema() if self.output_type is not None else None

    def cache_key(self, model: str) -> str:
        """sha256 over everything that can change the answer: model, messages, schema, sampling."""
        ident = {
            "model": model,
            "messages": [m.model_dump() for m in self.messages],
            "schema": self.json_schema(),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
            "stop": list(self.stop),
            "top_logprobs": self.top_logprobs,
        }
        blob = json.dumps(ident, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def prompt_text(self) -> str:
        return "\n".join(f"{m.role}: {m.content}" for m in self.messages)


class ChatResponse(BaseModel):
    text: str
    model: str
    usage: Usage = Field(default_factory=Usage)
    latency_ms: float = 0.0
    parsed: Any = None  # an instance of the request's `output_type` when one was asked for
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    cached: bool = False
    repaired: bool = False  # structured output only validated after the repair attempt
    # Server-reported speed when the backend gives it (llama.cpp: prompt_n, prompt_per_second,
    # predicted_n, predicted_per_second, ...); None otherwise.
    timings: dict[str, float] | None = None

    def first_token_probs(self) -> dict[str, float]:
        """Probabilities of the first token's top-k alternatives (stripped, case kept), summed per text."""
        if not self.logprobs:
            return {}
        first = self.logprobs[0]
        alts = first.top_logprobs or [TopLogprob(token=first.token, logprob=first.logprob)]
        out: dict[str, float] = {}
        for alt in alts:
            key = alt.token.strip()
            out[key] = out.get(key, 0.0) + math.exp(alt.logprob)
        return out


class ChatModel(ABC):
    """A chat model. `name` is its registry name, e.g. `"openai:gpt-4o-mini"`."""

    name: str

    @abstractmethod
    async def request(self, req: ChatRequest) -> ChatResponse:
        """Answer one request; structured output is validated (see `structured.py`)."""

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        """Yield the reply's text in pieces. The default yields the whole reply at once."""
        resp = await self.request(req)
        yield resp.text

    async def aclose(self) -> None:  # noqa: B027 - optional hook, a no-op for most backends
        """Release clients and connections. Safe to call twice."""

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code (the CLI, scripts, notebooks).

    Inside a running event loop (a notebook) the coroutine runs on a fresh loop in a worker
    thread instead of failing, with the caller's context variables (the call log's `call_scope`).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(ctx.run, asyncio.run, coro).result()


def estimate_tokens(text: str) -> int:
    """A cheap, deterministic token estimate (about 4 characters a token) for budgets and limits."""
    return max(1, math.ceil(len(text) / 4)) if text else 0
