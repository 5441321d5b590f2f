"""Composable wrappers: each is a `ChatModel` around another one.

Recommended order, outermost first (what `registry.wrap` builds):
`Logged(Cached(Retrying(RateLimited(backend))))` - every call is logged, cache hits cost
nothing and skip the limiter, and every retry attempt passes through the rate limiter again.

`RateLimited` holds two token buckets (requests and tokens per minute); a request reserves its
estimated tokens (prompt estimate + max_tokens) and is reconciled with the real usage after.
`Retrying` retries `TransientModelError` (429, 5xx, timeouts, dropped connections) with
exponential backoff and jitter, waits exactly `Retry-After` when the server sends it, and never
retries `QuotaExhaustedError`, `ModelRequestError` or `StructuredOutputError`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from ragloop.models.chat.base import ChatModel, ChatRequest, ChatResponse, estimate_tokens
from ragloop.models.errors import TransientModelError

DEFAULT_COMPLETION_ESTIMATE = 256


class WrapperModel(ChatModel):
    """Delegates everything to `inner`; subclasses override what they change."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner
        self.name = inner.name

    async def request(self, req: ChatRequest) -> ChatResponse:
        return await self.inner.request(req)

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        async for piece in self.inner.stream(req):
            yield piece

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Bucket:
    """A token bucket: `capacity` units, refilled at `rate` units a second."""

    def __init__(self, per_minute: float, capacity: float | None) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(capacity if capacity is not None else per_minute)
        self.level = self.capacity
        self.stamp = time.monotonic()

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for(self, amount: float, now: float) -> float:
        self._refill(now)
        amount = min(amount, self.capacity)  # a request larger than the bucket waits for a full one
        return 0.0 if self.level >= amount else (amount - self.level) / self.rate

    def take(self, amount: float) -> None:
        self.level -= min(amount, self.capacity)

    def give_back(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


class RateLimited(WrapperModel):
    """At most `rpm` requests and `tpm` tokens per minute (either may be None: unlimited).

    `burst_requests` / `burst_tokens` size the buckets (default: a full minute's worth). Share
    one instance among all callers of the same model so they share the budget.
    """

    def __init__(
        self,
        inner: ChatModel,
        *,
        rpm: float | None = None,
        tpm: float | None = None,
        burst_requests: float | None = None,
        burst_tokens: float | None = None,
    ) -> None:
        super().__init__(inner)
        self._requests = _Bucket(rpm, burst_requests) if rpm else None
        self._tokens = _Bucket(tpm, burst_tokens) if tpm else None
        self._lock: asyncio.Lock | None = None
        self.waited_s = 0.0  # total time callers spent waiting for the limiter

    @staticmethod
    def estimate(req: ChatRequest) -> int:
        return estimate_tokens(req.prompt_text()) + (req.max_tokens or DEFAULT_COMPLETION_ESTIMATE)

    async def _acquire(self, tokens: int) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # FIFO: waiters are served in arrival order
            while True:
                now = time.monotonic()
                wait = max(
                    self._requests.wait_for(1, now) if self._requests else 0.0,
                    self._tokens.wait_for(tokens, now) if self._tokens else 0.0,
                )
                if wait <= 0:
                    if self._requests:
                        self._requests.take(1)
                    if self._tokens:
                        self._tokens.take(tokens)
                    return
                self.waited_s += wait
                await asyncio.sleep(wait)

    def _reconcile(self, estimated: int, resp: ChatResponse) -> None:
        if self._tokens is None or not resp.usage.total_tokens:
            return
        delta = estimated - resp.usage.total_tokens
        if delta > 0:
            self._tokens.give_back(delta)
        else:
            self._tokens.take(-delta)

    async def request(self, req: ChatRequest) -> ChatResponse:
        est = self.estimate(req)
        await self._acquire(est)
        resp = await self.inner.request(req)
        self._reconcile(est, resp)
        return resp

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        await self._acquire(self.estimate(req))
        async for piece in self.inner.stream(req):
            yield piece


class Retrying(WrapperModel):
    """Retry transient failures: attempt n waits `base * 2**(n-1)` (capped), jittered to 50-100%.

    A server's `Retry-After` replaces the backoff for that wait; one longer than
    `max_retry_after_s` is not waited for: the error goes to the caller at once.
    """

    def __init__(
        self,
        inner: ChatModel,
        *,
        max_attempts: int = 5,
        base_delay_s: float = 0.5,
        max_delay_s: float = 30.0,
        max_retry_after_s: float = 120.0,
        jitter: bool = True,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(inner)
        self.max_attempts = max(1, max_attempts)
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.max_retry_after_s = max_retry_after_s
        self.jitter = jitter
        self.rng = rng or random.Random()
        self.sleep = sleep
        self.retries = 0  # retries made, over the wrapper's life
        self.delays: list[float] = []  # every wait, in order (for reports and tests)

    def delay_for(self, attempt: int, exc: TransientModelError) -> float | None:
        """Seconds to wait after failed attempt `attempt` (1-based), or None to give up."""
        if attempt >= self.max_attempts:
            return None
        if exc.retry_after is not None:
            return exc.retry_after if exc.retry_after <= self.max_retry_after_s else None
        backoff = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return self.rng.uniform(backoff / 2, backoff) if self.jitter else backoff

    async def _pause(self, attempt: int, exc: TransientModelError) -> None:
        delay = self.delay_for(attempt, exc)
        if delay is None:
            raise exc
        self.retries += 1
        self.delays.append(delay)
        await self.sleep(delay)

    async def request(self, req: ChatRequest) -> ChatResponse:
        attempt = 1
        while True:
            try:
                return await self.inner.request(req)
            except TransientModelError as exc:
                await self._pause(attempt, exc)
                attempt += 1

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        """Retried only while nothing has been yielded: a half-sent reply is not replayed."""
        attempt = 1
        while True:
            started = False
            try:
                async for piece in self.inner.stream(req):
                    started = True
                    yield piece
                return
            except TransientModelError as exc:
                if started:
                    raise
                await self._pause(attempt, exc)
                attempt += 1
