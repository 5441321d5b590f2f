"""`ServiceState`: everything one app instance owns, built by the app factory (never a module global)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from ragloop.config import Settings
from ragloop.service.auth import RateLimiter
from ragloop.service.config import ServiceConfig
from ragloop.service.documents import DocumentJobs
from ragloop.service.metrics import ServiceMetrics
from ragloop.service.pipelines import AgentManager
from ragloop.service.recorder import AnswerRecorder
from ragloop.service.worker import EvaluationWorker
from ragloop.store import Store

log = logging.getLogger("ragloop.service")


@dataclass
class ServiceState:
    settings: Settings
    config: ServiceConfig
    store: Store
    owns_store: bool
    metrics: ServiceMetrics
    limiter: RateLimiter
    agents: AgentManager
    recorder: AnswerRecorder
    documents: DocumentJobs
    worker: EvaluationWorker | None = None
    started_at: float = field(default_factory=time.time)
    answer_slots: asyncio.Semaphore | None = None

    def slots(self) -> asyncio.Semaphore:
        """Bounds concurrent graph runs (created lazily, inside the serving event loop)."""
        if self.answer_slots is None:
            self.answer_slots = asyncio.Semaphore(self.config.max_concurrent_answers)
        return self.answer_slots

    def start(self) -> None:
        if self.worker is not None:
            self.worker.start_thread()

    async def stop(self) -> None:
        await self.recorder.drain()
        if self.worker is not None:
            self.worker.stop()
            self.worker.join()
            if self.worker.judge is not None:
                try:
                    await self.worker.judge.aclose()
                except Exception as exc:  # closing a remote client must not block shutdown
                    log.warning("closing the judge failed: %s", exc)
        self.documents.shutdown(wait=True)
        self.agents.close()
        if self.owns_store:
            self.store.close()
