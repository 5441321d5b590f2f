"""`Logged`: every model call into one call log, attributed to the answer or job it served.

The call log (prompt, response, model, tokens, latency, cost, cached, error; answer id, run id,
purpose, graph step) is the raw material of the self-improvement loop and the only usage ledger:
daily or per-model totals are sums over it. It lives in the service database's `model_calls`
table, but this layer must not import the store, so `Logged` writes to a `CallSink`, a protocol
the store's `ModelCalls` repository satisfies structurally (`store.model_calls` *is* a sink); the
service, the worker and the CLI hand theirs in. `MemorySink` keeps rows in memory (tests). A call
travels as one typed `CallRecord` (`ragloop.calls`, shared with the store).

Who a call was for is not a property of the model (one chat model serves every node of the answer
graph, and its LLM scorer) but of the code running it, so it travels in a context variable:
`call_scope(run_id=..., purpose=...)` around an answer or a job, `call_scope(step=...)` around a
graph node; nested scopes override only what they name. Context variables follow asyncio tasks and
`asyncio.to_thread`, so a call made anywhere below the scope is attributed to it.

A log write that fails is logged as a warning and never fails the model call: an answer is not
refused because its accounting could not be written. Cache hits are logged (`cached=True`) and
cost nothing; failed calls are logged with their error class, and a structured-output failure still
books the tokens it spent. Prices are USD per million tokens: defaults below, overridden by the
JSON file named in `RAGLOOP_MODEL_PRICES` (`{"openai:gpt-4o-mini": [0.15, 0.6], "openai:*": [1, 2]}`).

Personal data: the prompt's messages, the response and the error text are redacted (`ragloop.text.pii`,
`[EMAIL]`, `[CARD]`, ...) before they reach the sink, whatever the sink is; the caller still gets the
model's response as it came.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from ragloop import tracing
from ragloop.calls import CallRecord, CallSink
from ragloop.models.chat.base import ChatModel, ChatRequest, ChatResponse, Usage, estimate_tokens
from ragloop.models.chat.wrappers import WrapperModel
from ragloop.models.errors import ModelError, StructuredOutputError
from ragloop.text.pii import Redactor, default_redactor

log = logging.getLogger("ragloop.models")


class CallPurpose(StrEnum):
    """What a model call was for (`model_calls.purpose`). The evaluation tiers' calls carry their tier's
    name (`ragloop.store.vocabulary.Tier`'s values, checked by a test), so a job's calls read as its tier."""

    ANSWER = "answer"
    """The answer graph (`step` names the node)."""
    HEURISTIC = "heuristic"
    """Tier 1 (an `llm:` support scorer)."""
    LLM_JUDGE = "llm_judge"
    """The tier-2 judge."""
    DIAGNOSIS = "diagnosis"
    """Failure diagnosis: the oracle's scorer, paraphrases, knowledge-gap questions (`step` says which)."""
    GOLDEN_RUN = "golden_run"
    """Answering the golden set: the scheduled regression, candidate smoke tests and golden checks,
    prompt-candidate trials (`step` names the node)."""
    REMEDIATION = "remediation"
    """A remediation's own calls: the answer-check fit reading labelled answers and golden drafts."""
    GOLDEN_DRAFT = "golden_draft"
    """Drafting golden-set questions (`ragloop eval golden draft --chat-model`)."""
    EVAL_RUN = "eval_run"
    """The evaluation harness (`ragloop eval run`): the pipeline's calls and the judge's (`step` "judge")."""
    JUDGE_QUALIFICATION = "judge_qualification"
    """A candidate judge re-scoring the human-labelled answers (`ragloop drift qualify`)."""
    MODEL_CHECK = "model_check"
    """`ragloop models check`'s probe of a chat model."""
    UNATTRIBUTED = "unattributed"
    """A call made outside any `call_scope` that names a purpose, by a wrapper given none."""


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float

    def cost(self, usage: Usage) -> float:
        return (usage.prompt_tokens * self.input_per_mtok + usage.completion_tokens * self.output_per_mtok) / 1e6


# List prices (USD per 1M tokens) at the time of writing; override with RAGLOOP_MODEL_PRICES.
DEFAULT_PRICES: dict[str, Price] = {
    "openai:gpt-4o-mini": Price(0.15, 0.60),
    "openai:gpt-4o": Price(2.50, 10.00),
    "openai:gpt-4.1": Price(2.00, 8.00),
    "openai:gpt-4.1-mini": Price(0.40, 1.60),
    "openai:gpt-4.1-nano": Price(0.10, 0.40),
    "local:*": Price(0.0, 0.0),
    "test:*": Price(0.0, 0.0),
}


class PriceTable:
    """Exact model name first, then the provider wildcard `"provider:*"`; else unknown (None)."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self.prices = dict(DEFAULT_PRICES if prices is None else prices)

    @classmethod
    def from_env(cls) -> PriceTable:
        table = cls()
        raw = os.environ.get("RAGLOOP_MODEL_PRICES")
        if raw:
            data = json.loads(Path(raw).expanduser().read_text())
            table.prices.update({k: Price(float(v[0]), float(v[1])) for k, v in data.items()})
        return table

    def get(self, model: str) -> Price | None:
        if model in self.prices:
            return self.prices[model]
        return self.prices.get(model.split(":", 1)[0] + ":*")

    def cost(self, model: str, usage: Usage) -> float | None:
        price = self.get(model)
        return price.cost(usage) if price is not None else None


@dataclass
class MemorySink:
    """A `CallSink` that keeps every call in `calls` (tests, short scripts)."""

    calls: list[CallRecord] = field(default_factory=list)

    def record(self, call: CallRecord) -> CallRecord:
        self.calls.append(call)
        return call


@dataclass(frozen=True)
class CallScope:
    """Who the calls made now are for. `answer_id` must name a stored answer (the log's foreign key):
    before the answer is stored, use `run_id` and link the rows when it is (`ModelCalls.link`)."""

    answer_id: str | None = None
    run_id: str | None = None
    purpose: str | None = None
    step: str | None = None


_NO_SCOPE = CallScope()
_scope: ContextVar[CallScope | None] = ContextVar("ragloop_call_scope", default=None)


def current_scope() -> CallScope:
    return _scope.get() or _NO_SCOPE


@contextmanager
def call_scope(
    *, answer_id: str | None = None, run_id: str | None = None, purpose: str | None = None, step: str | None = None
) -> Iterator[CallScope]:
    """Attribute the model calls made inside to this answer / run / purpose / step (what is not named
    is inherited from the enclosing scope). Safe inside async generators: leaving the scope in another
    context (a generator finalised elsewhere) leaves that context alone."""
    outer = current_scope()
    given = {"answer_id": answer_id, "run_id": run_id, "purpose": purpose, "step": step}
    scope = replace(outer, **{k: v for k, v in given.items() if v is not None})
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        with contextlib.suppress(ValueError):  # exited in a different context than it was entered in
            _scope.reset(token)


def call_attributes(call: CallRecord) -> tracing.Attributes:
    """A model call's span attributes, from the row the call log writes (GenAI semantic conventions,
    which Phoenix and Langfuse read): model, tokens, cost, purpose and step; the prompt and response as
    lengths unless content capture is allowed."""
    prompt = call.prompt
    out: tracing.Attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": call.model,
        "gen_ai.usage.input_tokens": call.prompt_tokens,
        "gen_ai.usage.output_tokens": call.completion_tokens,
        "openinference.span.kind": "LLM",
        "ragloop.purpose": str(call.purpose),
        "ragloop.cached": call.cached,
        "ragloop.latency_ms": float(call.latency_ms or 0.0),
    }
    for key, value in (("step", call.step), ("run_id", call.run_id), ("answer_id", call.answer_id)):
        if value:
            out[f"ragloop.{key}"] = str(value)
    if call.cost_usd is not None:
        out["ragloop.cost_usd"] = float(call.cost_usd)
    if call.error:
        out["error.type"] = call.error.split(":", 1)[0]
    out["ragloop.prompt.messages"] = len(prompt)
    out.update(tracing.text("ragloop.prompt", "\n".join(str(m.get("content", "")) for m in prompt)))
    out.update(tracing.text("ragloop.response", call.response))
    return out


class Logged(WrapperModel):
    """Writes each call to `sink` with the current `call_scope` (`purpose` when the scope names none)."""

    def __init__(
        self,
        inner: ChatModel,
        sink: CallSink,
        *,
        purpose: str | None = None,
        prices: PriceTable | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(inner)
        self.sink = sink
        self.redactor = redactor or default_redactor()
        self.purpose = purpose
        self.prices = prices or PriceTable.from_env()
        self.failed_writes = 0

    async def _record(
        self,
        req: ChatRequest,
        *,
        text: str | None,
        usage: Usage,
        latency_ms: float,
        cached: bool,
        error: str | None,
    ) -> None:
        scope = current_scope()
        red = self.redactor
        call = CallRecord(
            model=self.name,
            purpose=scope.purpose or self.purpose or CallPurpose.UNATTRIBUTED,
            prompt=[red.redact_deep(m.model_dump()) for m in req.messages],
            response=red.redact_optional(text),
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            latency_ms=round(latency_ms, 3),
            cost_usd=0.0 if cached else self.prices.cost(self.name, usage),
            answer_id=scope.answer_id,
            run_id=req.run_id or scope.run_id,
            error=red.redact_optional(error),
            cached=cached,
            step=scope.step,
        )
        if tracing.enabled():  # the call's span (opened by `request`/`stream`) carries the same record
            tracing.annotate_current(call_attributes(call))
        try:
            await asyncio.to_thread(self.sink.record, call)
        except Exception as exc:  # the call happened; its log line must not undo it
            self.failed_writes += 1
            log.warning("model call to %s not logged: %s: %s", self.name, type(exc).__name__, str(exc)[:200])

    async def request(self, req: ChatRequest) -> ChatResponse:
        with tracing.span(f"chat {self.name}", kind="client"):  # a child of the graph node that asked
            return await self._request(req)

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        """Logged once the stream ends; token counts are estimates (streams carry no usage here)."""
        with tracing.span(f"chat {self.name}", kind="client"):
            async for piece in self._stream(req):
                yield piece

    async def _request(self, req: ChatRequest) -> ChatResponse:
        start = time.perf_counter()
        try:
            resp = await self.inner.request(req)
        except ModelError as exc:
            usage = Usage()
            text = None
            if isinstance(exc, StructuredOutputError):
                usage = Usage(prompt_tokens=exc.prompt_tokens, completion_tokens=exc.completion_tokens)
                text = exc.raw_text
            await self._record(
                req,
                text=text,
                usage=usage,
                latency_ms=(time.perf_counter() - start) * 1000,
                cached=False,
                error=f"{type(exc).__name__}: {exc}",
            )
            raise
        await self._record(
            req, text=resp.text, usage=resp.usage, latency_ms=resp.latency_ms, cached=resp.cached, error=None
        )
        return resp

    async def _stream(self, req: ChatRequest) -> AsyncIterator[str]:
        start = time.perf_counter()
        pieces: list[str] = []
        error: str | None = None
        try:
            async for piece in self.inner.stream(req):
                pieces.append(piece)
                yield piece
        except ModelError as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            text = "".join(pieces)
            usage = Usage(prompt_tokens=estimate_tokens(req.prompt_text()), completion_tokens=estimate_tokens(text))
            await self._record(
                req,
                text=text,
                usage=usage,
                latency_ms=(time.perf_counter() - start) * 1000,
                cached=False,
                error=error,
            )
