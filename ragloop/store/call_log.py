"""A call log for processes without a store of their own (the CLI, the evaluation harness's worker
processes): the default store's `model_calls`, opened only when a model is really called.

It logs to the same place `ragloop serve` would (`RAGLOOP_DATABASE_URL`, else `RAGLOOP_HOME/ragloop.db`),
so `ragloop models calls` shows a CLI question's or an eval run's calls beside the service's. The
offline default calls no model, so a plain `ragloop ask` or `ragloop eval run` never opens (or
migrates) the store for this.
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING

from ragloop.calls import CallRecord

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

    def record(self, call: CallRecord) -> object:
        return self._open().model_calls.record(call)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
