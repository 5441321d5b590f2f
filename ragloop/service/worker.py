"""The evaluation worker: the loop that claims jobs from the durable queue and hands each one to
`ragloop.improve.evaluate.OnlineEvaluator`, which evaluates, routes and records it.

What is computed and written for a job (tiers, routing, failed evaluations, dead-letter records,
the capped review intake, failure diagnosis, remediation) lives in `ragloop.improve`; this module only
runs it: claiming due jobs of the tiers the evaluator (and, when given one, the `DiagnosisEngine`)
can process, extending the lease while a job runs, sweeping dead letters, choosing the review intake
and selecting answers to diagnose now and then, a remediation pass after diagnoses and at each sweep
(in the background: a pass can fit a collection-wide chunk size for minutes, and the queue must not
wait on it; one pass at a time), waking on `notify()`, stopping cleanly, a thread with its own event
loop for the server's embedded worker, and the Prometheus counts.

One worker runs in a thread inside `ragloop serve` (the embedded default); `ragloop worker`
processes run the same loop for scale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragloop import tracing
from ragloop.improve.engine import DIAGNOSIS_TIER, DiagnosisEngine, job_call_scope
from ragloop.improve.evaluate import OnlineEvaluator, Outcome
from ragloop.improve.judge import Judge
from ragloop.improve.tier1 import HeuristicModel
from ragloop.improve.tier1_cache import Tier1Cache, make_tier1_cache
from ragloop.models.scoring.base import Scorer
from ragloop.service.config import ServiceConfig
from ragloop.service.metrics import ServiceMetrics
from ragloop.store import Job, Store
from ragloop.store.vocabulary import Tier

log = logging.getLogger("ragloop.service.worker")

SWEEP_EVERY_S = 30.0
REMEDIATE_MIN_S = 5.0
"""At most one remediation pass this often: one after a burst of diagnoses, not one per diagnosis."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def job_attributes(job: Job, worker_id: str) -> tracing.Attributes | None:
    """A job span's attributes (None when tracing is off)."""
    if not tracing.enabled():
        return None
    return {
        "ragloop.job.id": job.job_id,
        "ragloop.job.kind": job.tier,
        "ragloop.job.attempts": job.attempts,
        "ragloop.answer_id": job.answer_id,
        "ragloop.worker_id": worker_id,
    }


@dataclass
class Processed:
    job: Job
    outcome: Outcome


class EvaluationWorker:
    def __init__(
        self,
        store: Store,
        config: ServiceConfig,
        *,
        judge: Judge | None = None,
        support_scorer: Scorer | None = None,
        model: HeuristicModel | None = None,
        metrics: ServiceMetrics | None = None,
        worker_id: str | None = None,
        job_delay_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        diagnosis: DiagnosisEngine | None = None,
        remediation: Callable[[], object] | None = None,
        tier1_cache: Tier1Cache | None = None,
    ) -> None:
        """`diagnosis`: also claim the diagnosis tier; `remediation`: one remediation pass (audit, schedule,
        apply), run after diagnoses complete and at every sweep (audits fall due with time). `tier1_cache`:
        default Redis with `config.redis_url` (shared by the fleet), else this process's own LRU."""
        self.store = store
        self.diagnosis = diagnosis
        self.remediation = remediation
        self._remediation_due = remediation is not None
        self._last_remediation = -1e18
        self._pass: asyncio.Task[Any] | None = None
        """The remediation pass in flight, if any: jobs go on being claimed while it runs."""
        self.config = config
        self.tier1_cache = tier1_cache if tier1_cache is not None else make_tier1_cache(config.redis_url)
        self.evaluator = OnlineEvaluator(
            store,
            config.routing,
            judge=judge,
            support_scorer=support_scorer,
            model=model,
            clock=clock,
            tier1_cache=self.tier1_cache,
        )
        self.metrics = metrics
        self.worker_id = worker_id or default_worker_id()
        self.job_delay_s = job_delay_s
        self.clock = clock
        self._last_sweep = -1e18
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.processed = 0

    @property
    def tiers(self) -> list[Tier]:
        return list(self.evaluator.tiers) + [DIAGNOSIS_TIER] * (self.diagnosis is not None)

    # ------------------------------------------------------------------ the loop

    async def run_once(self) -> Processed | None:
        """Claim one due job and process it; None when nothing is due."""
        job = await asyncio.to_thread(
            self.store.queue.claim, self.worker_id, self.config.lease_seconds, tiers=self.tiers
        )
        if job is None:
            return None
        return await self.process(job)

    async def run(self, *, drain: bool = False, max_jobs: int | None = None) -> int:
        """Work until `stop()` (or, with `drain`, until nothing is due; or `max_jobs` jobs)."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        done = 0
        log.info("evaluation worker %s started (tiers: %s)", self.worker_id, ", ".join(self.tiers))
        while not self._stop.is_set():
            if self.clock() - self._last_sweep > SWEEP_EVERY_S:
                self._last_sweep = self.clock()
                await self._guarded(self.evaluator.sweep_dead_letters)
                await self._guarded(self.evaluator.intake.select_due)
                if self.diagnosis is not None:
                    await self._guarded(self.diagnosis.sweep_dead)
                    await self._guarded(lambda: asyncio.to_thread(self.diagnosis.select) if self.diagnosis else None)
                self._remediation_due = self.remediation is not None
            idle = self._pass is None or self._pass.done()
            if self._remediation_due and idle and self.clock() - self._last_remediation >= REMEDIATE_MIN_S:
                self._remediation_due, self._last_remediation = False, self.clock()
                self._pass = asyncio.create_task(self._guarded(self._remediate))
            result = await self._guarded(self.run_once)
            if isinstance(result, Processed):
                done += 1
                if max_jobs is not None and done >= max_jobs:
                    break
                continue
            if drain and result is None:
                if self._pass is not None and not self._pass.done():
                    await self._pass  # drained means its pass is done too (it may have queued work)
                    continue
                break
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.poll_interval_s)
        if self._pass is not None:
            await self._pass  # its thread cannot be cancelled: stopping waits for it rather than leave it running
        log.info("evaluation worker %s stopped after %d jobs", self.worker_id, done)
        return done

    async def _guarded(self, fn: Callable[[], Any]) -> Any:
        try:
            out = fn()
            return await out if asyncio.iscoroutine(out) else out
        except Exception as exc:  # the store being briefly down must not kill the worker
            log.warning("evaluation worker %s: %s: %s", self.worker_id, type(exc).__name__, str(exc)[:300])
            await asyncio.sleep(min(5.0, self.config.poll_interval_s * 4))
            return exc

    def notify(self) -> None:
        """Wake the loop now (an answer was just queued); safe from any thread."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

    def stop(self) -> None:
        self._stop.set()
        self.notify()

    def start_thread(self) -> None:
        """Run the loop in a daemon thread with its own event loop (the server's embedded worker)."""
        self._stop.clear()
        self._thread = threading.Thread(target=lambda: asyncio.run(self.run()), name="ragloop-eval-worker", daemon=True)
        self._thread.start()

    def join(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # ------------------------------------------------------------------ one job

    async def process(self, job: Job) -> Processed:
        start = time.perf_counter()
        # one span per job (a root: the answer's request is long gone); its judge's model calls are children
        link = str(job.payload.get("traceparent") or "") if tracing.enabled() else ""  # the answer's request
        attrs = job_attributes(job, self.worker_id)
        with tracing.span(f"ragloop.job {job.tier}", attrs, kind="consumer", link=link) as sp:
            if self.job_delay_s:
                await asyncio.sleep(self.job_delay_s)
            beat = asyncio.create_task(self._heartbeat(job))
            try:
                if self.diagnosis is not None and job.tier == DIAGNOSIS_TIER:
                    outcome = await self.diagnosis.process(job, self.worker_id)
                    self._remediation_due |= self.remediation is not None and outcome == Outcome.COMPLETED
                else:
                    with job_call_scope(job):  # the judge's and scorer's calls are logged against the answer
                        outcome = await self.evaluator.process(job, self.worker_id)
            finally:
                beat.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await beat
            tracing.set_attributes(sp, {"ragloop.job.status": str(outcome)})
        self.processed += 1
        if self.metrics is not None:
            self.metrics.evaluation_seconds.labels(job.tier).observe(time.perf_counter() - start)
            if outcome in (Outcome.COMPLETED, Outcome.FAILED):
                self.metrics.evaluations.labels(job.tier, outcome).inc()
            elif outcome == Outcome.RETRY:
                self.metrics.job_retries.labels(job.tier).inc()
        return Processed(job, outcome)

    async def _remediate(self) -> None:
        if self.remediation is not None:
            await asyncio.to_thread(self.remediation)

    async def _heartbeat(self, job: Job) -> None:
        every = max(0.5, self.config.lease_seconds / 3)
        while True:
            await asyncio.sleep(every)
            assert job.lease_token is not None
            await asyncio.to_thread(
                self.store.queue.extend_lease, job.job_id, self.worker_id, job.lease_token, self.config.lease_seconds
            )
