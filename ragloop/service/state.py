"""`ServiceState`: everything one app instance owns, built by the app factory (never a module global)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from ragloop.config import Settings
from ragloop.service.auth import RateLimiter
from ragloop.service.config import ServiceConfig
from ragloop.service.document_recovery import recover_document_jobs
from ragloop.service.documents import DocumentJobs
from ragloop.service.memory import MAX_CHECKPOINT_CONNECTIONS
from ragloop.service.metrics import ServiceMetrics
from ragloop.service.periodic import PeriodicTasks
from ragloop.service.pipelines import AgentManager, ExperimentRouter
from ragloop.service.recorder import AnswerRecorder
from ragloop.service.worker import EvaluationWorker
from ragloop.store import Store
from ragloop.text.pii import Redactor

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
    experiments: ExperimentRouter | None = None
    loops: PeriodicTasks | None = None
    started_at: float = field(default_factory=time.time)
    answer_slots: asyncio.Semaphore | None = None

    @property
    def redactor(self) -> Redactor:
        """The instance's one `Redactor` (the recorder's): feedback and reviews are redacted with it too."""
        return self.recorder.redactor

    def slots(self) -> asyncio.Semaphore:
        """Bounds concurrent graph runs (created lazily, inside the serving event loop)."""
        if self.answer_slots is None:
            self.answer_slots = asyncio.Semaphore(self.config.max_concurrent_answers)
        return self.answer_slots

    async def start(self) -> None:
        """Open the conversation memory (a connection pool on PostgreSQL), take up the document jobs
        the last run left unfinished, start the embedded worker."""
        await self.agents.memory.aopen(pool_size=min(MAX_CHECKPOINT_CONNECTIONS, self.config.max_concurrent_answers))
        try:
            await asyncio.to_thread(recover_document_jobs, self.documents)
        except Exception as exc:  # the service can still answer; the jobs wait for the next start
            log.error("document jobs left by the last run were not taken up: %s", exc)
        if self.worker is not None:
            self.worker.start_thread()
        if self.loops is not None:
            self.loops.start()

    async def stop(self) -> None:
        if self.loops is not None:
            await self.loops.stop()
        if self.experiments is not None:
            self.experiments.close()
        self.limiter.close()
        if self.worker is not None:
            self.worker.stop()
            self.worker.join()
            self.worker.tier1_cache.close()
            if self.worker.diagnosis is not None:
                self.worker.diagnosis.close()
            if self.worker.evaluator.judge is not None:
                try:
                    await self.worker.evaluator.judge.aclose()
                except Exception as exc:  # closing a remote client must not block shutdown
                    log.warning("closing the judge failed: %s", exc)
        self.documents.shutdown(wait=True)
        await self.agents.memory.aclose()
        self.agents.close()
        if self.owns_store:
            self.store.close()
