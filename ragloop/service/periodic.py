"""The service's periodic tasks: experiment aggregation (every `experiment_aggregate_interval_s`,
300 s by default) and the scheduled golden-set regression (`regression_interval_s`, off by
default; 86400 for nightly). Intervals are on the process clock (`RAGLOOP_CLOCK`): under a
simulation's 720x clock "nightly" is every two real minutes. Each runs in a thread off
the event loop; a failing round is logged
and the next one runs on time. Several servers may aggregate the same experiment: promotion and
halting are conditional UPDATEs in the store, so only one of them acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from ragloop import tracing
from ragloop.config.clock import CONFIGURED_CLOCK, real_seconds

log = logging.getLogger("ragloop.service")


class PeriodicTasks:
    def __init__(self) -> None:
        self._jobs: list[tuple[str, float, Callable[[], Any]]] = []
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, name: str, interval_s: float, fn: Callable[[], Any]) -> None:
        if interval_s > 0:
            self._jobs.append((name, interval_s, fn))

    @property
    def names(self) -> list[str]:
        return [n for n, _, _ in self._jobs]

    def start(self) -> None:
        for name, interval, fn in self._jobs:
            self._tasks.append(asyncio.create_task(self._loop(name, interval, fn), name=f"ragloop-{name}"))

    async def _loop(self, name: str, interval: float, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(real_seconds(CONFIGURED_CLOCK, interval))
            try:
                # one span per round (in the thread too: `to_thread` copies the context), "error" when it failed
                with tracing.span(f"ragloop.periodic {name}", {"ragloop.job.kind": name}):
                    await asyncio.to_thread(fn)
            except Exception:
                log.exception("periodic task %s failed; it runs again in %.0f s", name, interval)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
