"""External search for the CRAG fallback (node 6): providers behind a timeout and a circuit breaker.

`make_search_provider(spec, settings)` turns the `agent.external_search` setting into a provider:

- `None`: no external search (the offline default);
- `"searxng:http://127.0.0.1:8888"`: a SearxNG-compatible JSON API;
- `"tavily:"` or `"tavily:https://base"`: the Tavily API (key from `RAGLOOP_TAVILY_API_KEY`,
  else `TAVILY_API_KEY`);
- `"collection:NAME"`: another local collection.

Every provider it returns is a `GuardedProvider`: a per-call timeout (3 s by default) and a circuit
breaker (open after 3 consecutive failures, one trial call after a 30 s cooldown). Failures raise a
typed `SearchError` whose message is the reason; the graph node catches it, traces the reason and
carries on with internal results only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from ragloop.agent.search_providers import (
    SNIPPET_MAX_CHARS,
    TAVILY_BASE,
    CollectionProvider,
    SearchBadResponse,
    SearchError,
    SearchProvider,
    SearchResult,
    SearchTimeout,
    SearchUnavailable,
    SearxNGProvider,
    TavilyProvider,
    clean_snippet,
    web_chunk_id,
)

if TYPE_CHECKING:
    from ragloop.config.settings import Settings

__all__ = [
    "KNOWN_PROVIDERS",
    "SNIPPET_MAX_CHARS",
    "CircuitBreaker",
    "CollectionProvider",
    "GuardedProvider",
    "SearchBadResponse",
    "SearchError",
    "SearchProvider",
    "SearchResult",
    "SearchTimeout",
    "SearchUnavailable",
    "SearxNGProvider",
    "TavilyProvider",
    "clean_snippet",
    "make_search_provider",
    "web_chunk_id",
]

log = logging.getLogger(__name__)

KNOWN_PROVIDERS = ("collection", "searxng", "tavily")
BreakerState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """closed --N consecutive failures--> open --cooldown--> half-open: one trial call;
    its success closes the circuit, its failure opens it again for another cooldown.

    Meant for one event loop (no locking). `clock` is injectable for tests.
    """

    def __init__(
        self,
        failure_threshold: int = 3,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.failures = 0  # consecutive
        self._open = False
        self._opened_at = 0.0
        self._trial_in_flight = False

    @property
    def state(self) -> BreakerState:
        if not self._open:
            return "closed"
        if self._trial_in_flight or self.clock() - self._opened_at >= self.cooldown_s:
            return "half_open"
        return "open"

    def retry_in(self) -> float:
        """Seconds until a trial call is let through (0 when calls go through now)."""
        if not self._open:
            return 0.0
        return max(0.0, self.cooldown_s - (self.clock() - self._opened_at))

    def allow(self) -> bool:
        """May a call go out now? In half-open state this claims the single trial."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._trial_in_flight:
            self._trial_in_flight = True
            return True
        return False

    def record_success(self) -> None:
        self.failures = 0
        self._open = False
        self._trial_in_flight = False

    def record_failure(self) -> None:
        self.failures += 1
        if self._trial_in_flight or (not self._open and self.failures >= self.failure_threshold):
            self._open = True
            self._opened_at = self.clock()
        self._trial_in_flight = False

    def release(self) -> None:
        """A call ended with neither outcome (cancelled): free the trial slot, change nothing else."""
        self._trial_in_flight = False


class GuardedProvider(SearchProvider):
    """`inner` behind a per-call timeout and a circuit breaker; every failure is a typed `SearchError`.

    An open circuit fails fast with `SearchUnavailable` without calling `inner`.
    """

    def __init__(self, inner: SearchProvider, *, timeout_s: float = 3.0, breaker: CircuitBreaker | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.timeout_s = timeout_s
        self.breaker = breaker or CircuitBreaker()

    def __repr__(self) -> str:
        return f"GuardedProvider({self.inner!r}, timeout_s={self.timeout_s:g})"

    def redact(self, text: str) -> str:
        return self.inner.redact(text)

    async def search(self, query: str, k: int = 5) -> list[SearchResult]:
        if not self.breaker.allow():
            raise SearchUnavailable(
                f"{self.name}: circuit open after {self.breaker.failures} consecutive failures; "
                f"next try in {self.breaker.retry_in():.0f} s"
            )
        try:
            results = await asyncio.wait_for(self.inner.search(query, k), self.timeout_s)
        except SearchUnavailable:
            self.breaker.release()
            raise
        except TimeoutError:
            self._failed(f"no answer within {self.timeout_s:g} s")
            raise SearchTimeout(f"{self.name}: no answer within {self.timeout_s:g} s") from None
        except SearchError as exc:
            self._failed(str(exc))
            raise
        except asyncio.CancelledError:
            self.breaker.release()
            raise
        except Exception as exc:
            reason = self.redact(f"{self.name}: unexpected {type(exc).__name__}: {exc}")
            self._failed(reason)
            raise SearchError(reason) from None
        self.breaker.record_success()
        return results

    def _failed(self, reason: str) -> None:
        was = self.breaker.state
        self.breaker.record_failure()
        if was != "open" and self.breaker.state == "open":
            log.warning(
                "search provider %s: circuit open for %.0f s after %d consecutive failures (last: %s)",
                self.name,
                self.breaker.cooldown_s,
                self.breaker.failures,
                self.redact(reason),
            )

    async def aclose(self) -> None:
        await self.inner.aclose()


def make_search_provider(spec: str | None, settings: Settings, timeout_s: float = 3.0) -> GuardedProvider | None:
    """The provider named by `spec` (see the module doc), wrapped in a `GuardedProvider`; `None` for none.

    A malformed spec or an unknown provider raises `ValueError` naming what is accepted.
    """
    if spec is None or not spec.strip():
        return None
    kind, _, arg = spec.strip().partition(":")
    kind, arg = kind.strip().lower(), arg.strip()
    inner: SearchProvider
    if kind == "searxng":
        if not arg:
            raise ValueError('searxng needs a base URL, e.g. "searxng:http://127.0.0.1:8888"')
        inner = SearxNGProvider(arg, timeout_s=timeout_s)
    elif kind == "tavily":
        inner = TavilyProvider(base_url=arg or TAVILY_BASE, timeout_s=timeout_s)
    elif kind == "collection":
        from ragloop.retrieval.collection import CollectionError

        if not arg:
            raise ValueError('collection needs a collection name, e.g. "collection:docs"')
        try:
            inner = CollectionProvider.for_collection(arg, settings)
        except CollectionError as exc:
            raise ValueError(str(exc)) from None
    else:
        raise ValueError(
            f"unknown search provider {kind!r} in {spec!r}: known providers are {', '.join(KNOWN_PROVIDERS)}"
        )
    return GuardedProvider(inner, timeout_s=timeout_s)
