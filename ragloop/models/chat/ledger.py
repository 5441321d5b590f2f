"""`Logged`: every call into the call log, every paid token into the daily usage ledger.

The call log (prompt, response, model, tokens, latency, cached, run id, error) is the raw
material of the self-improvement loop; the ledger sums tokens and cost per model per UTC day
from a price table. Cache hits are logged (`cached=1`) but cost nothing; failed calls are
logged with their error class, and a structured-output failure still books the tokens it
spent. Prices are USD per million tokens: defaults below, overridden by the JSON file named
in `RAGLOOP_MODEL_PRICES` (`{"openai:gpt-4o-mini": [0.15, 0.6], "openai:*": [1, 2]}`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ragloop.models.chat.base import ChatModel, ChatRequest, ChatResponse, Usage, estimate_tokens
from ragloop.models.chat.db import ModelsDB, chat_calls, usage_ledger
from ragloop.models.chat.wrappers import WrapperModel
from ragloop.models.errors import ModelError, StructuredOutputError


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


class Logged(WrapperModel):
    def __init__(
        self,
        inner: ChatModel,
        db: ModelsDB,
        *,
        run_id: str | None = None,
        prices: PriceTable | None = None,
        clock: Callable[[], float] = time.time,
        close_db: bool = False,
    ) -> None:
        super().__init__(inner)
        self.db = db
        self.close_db = close_db  # True when this wrapper owns the database (see `registry.wrap`)
        self.run_id = run_id
        self.prices = prices or PriceTable.from_env()
        self.clock = clock

    def _record(
        self,
        req: ChatRequest,
        *,
        text: str | None,
        usage: Usage,
        latency_ms: float,
        cached: bool,
        error: str | None,
    ) -> None:
        now = self.clock()
        cost = 0.0 if cached else self.prices.cost(self.name, usage)
        row: dict[str, Any] = {
            "ts": now,
            "run_id": req.run_id or self.run_id,
            "model": self.name,
            "request_key": req.cache_key(self.name),
            "prompt": json.dumps([m.model_dump() for m in req.messages], ensure_ascii=False),
            "response": text,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "latency_ms": latency_ms,
            "cached": cached,
            "cost_usd": cost,
            "error": error,
        }
        with self.db.engine.begin() as conn:
            conn.execute(chat_calls.insert().values(**row))
            if cached:
                return
            day = dt.datetime.fromtimestamp(now, dt.UTC).date().isoformat()
            ins = sqlite_insert(usage_ledger).values(
                day=day,
                model=self.name,
                requests=1,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cost_usd=cost or 0.0,
                unpriced_requests=1 if cost is None else 0,
            )
            ex = ins.excluded
            conn.execute(
                ins.on_conflict_do_update(
                    index_elements=[usage_ledger.c.day, usage_ledger.c.model],
                    set_={
                        "requests": usage_ledger.c.requests + 1,
                        "prompt_tokens": usage_ledger.c.prompt_tokens + ex.prompt_tokens,
                        "completion_tokens": usage_ledger.c.completion_tokens + ex.completion_tokens,
                        "cost_usd": usage_ledger.c.cost_usd + ex.cost_usd,
                        "unpriced_requests": usage_ledger.c.unpriced_requests + ex.unpriced_requests,
                    },
                )
            )

    async def aclose(self) -> None:
        await self.inner.aclose()
        if self.close_db:
            self.db.close()

    async def request(self, req: ChatRequest) -> ChatResponse:
        start = time.perf_counter()
        try:
            resp = await self.inner.request(req)
        except ModelError as exc:
            usage = Usage()
            text = None
            if isinstance(exc, StructuredOutputError):
                usage = Usage(prompt_tokens=exc.prompt_tokens, completion_tokens=exc.completion_tokens)
                text = exc.raw_text
            self._record(
                req,
                text=text,
                usage=usage,
                latency_ms=(time.perf_counter() - start) * 1000,
                cached=False,
                error=f"{type(exc).__name__}: {exc}",
            )
            raise
        self._record(req, text=resp.text, usage=resp.usage, latency_ms=resp.latency_ms, cached=resp.cached, error=None)
        return resp

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        """Logged once the stream ends; token counts are estimates (streams carry no usage here)."""
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
            self._record(
                req,
                text=text,
                usage=usage,
                latency_ms=(time.perf_counter() - start) * 1000,
                cached=False,
                error=error,
            )


def ledger_rows(db: ModelsDB) -> list[dict[str, Any]]:
    """The usage ledger, newest day first."""
    with db.engine.connect() as conn:
        rows = conn.execute(select(usage_ledger).order_by(usage_ledger.c.day.desc(), usage_ledger.c.model))
        return [dict(r._mapping) for r in rows]


def call_rows(db: ModelsDB, *, run_id: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
    """Call-log rows, oldest first, optionally for one run."""
    q = select(chat_calls).order_by(chat_calls.c.id).limit(limit)
    if run_id is not None:
        q = q.where(chat_calls.c.run_id == run_id)
    with db.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]
