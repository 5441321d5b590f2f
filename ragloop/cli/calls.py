"""The CLI's call log: the default store's `model_calls`, opened only when a model is really called.

Without a service database the CLI logs to the same place `ragloop serve` would (`RAGLOOP_DATABASE_URL`,
else `RAGLOOP_HOME/ragloop.db`), so `ragloop models calls` shows a CLI question's calls beside the
service's. The offline default calls no model, so a plain `ragloop ask` never opens (or migrates) the
store for this.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragloop.store import Store


class StoreCallLog:
    """A `CallSink` over `Store.open(url)`, opened on the first call (from any thread) and closed at exit."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url
        self._store: Store | None = None
        self._lock = threading.Lock()

    def _open(self) -> Store:
        with self._lock:
            if self._store is None:
                from ragloop.store import Store

                self._store = Store.open(self.url)
                atexit.register(self.close)
            return self._store

    def record(
        self,
        *,
        model: str,
        purpose: str,
        prompt: str | Sequence[Any] = (),
        response: str | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        latency_ms: float | None = None,
        cost_usd: float | None = None,
        answer_id: str | None = None,
        run_id: str | None = None,
        error: str | None = None,
        cached: bool = False,
        step: str | None = None,
    ) -> object:
        return self._open().model_calls.record(
            model=model,
            purpose=purpose,
            prompt=prompt,
            response=response,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_ms=latency_ms,
            cost_usd=cost_usd,
            answer_id=answer_id,
            run_id=run_id,
            error=error,
            cached=cached,
            step=step,
        )

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
