"""The evaluation worker: claims jobs from the durable queue and evaluates answers, tier by tier.

- **Tier 1** (`heuristic`, every answer): the features and linear model of `heuristics.py`. In the
  same transaction as the evaluation it routes the answer on: to tier 2 (a `llm_judge` job) when it
  is in the random sample, scores below the threshold, or asks a golden-set question; to tier 3 (a
  `human` review job) by a smaller random sample. Negative feedback routes to tier 2 from the
  feedback route, and detailed feedback to tier 3.
- **Tier 2** (`llm_judge`): the configured judge. A judge that fails is retried with backoff; on the
  last attempt a *failed* evaluation is written together with the dead letter, so no answer is ever
  silently left unjudged. A tier-2 score that disagrees with tier 1 by more than the threshold makes
  the answer a review candidate; each day's highest go to human review, capped (`review_intake.py`).
- **Exactly once**: the evaluation, any follow-up jobs and `complete()` commit in one transaction
  under the job's lease. A worker killed mid-job (even mid-transaction) leaves the job leased; the
  lease expires and the next claim redoes it from scratch.
- Jobs that died of lease expiry on their last attempt (a worker crashing every time) get their
  failed evaluation from `sweep_dead_letters()`, which every worker runs now and then.

One worker runs in a thread inside `ragloop serve` (the embedded default); `ragloop worker`
processes run the same loop for scale. Human (`human`) jobs are never claimed: they wait in the
review queue for `/v1/review`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from ragloop.models.scoring.base import Scorer
from ragloop.service.config import ServiceConfig
from ragloop.service.heuristics import PRIOR, HeuristicModel, Tier1Input, compute_features
from ragloop.service.judge import Judge, JudgeInput
from ragloop.service.metrics import ServiceMetrics
from ragloop.service.review_intake import ReviewIntake
from ragloop.store import Evaluation, EvaluationJob, Job, LeaseLostError, NotFoundError, Store, question_hash

log = logging.getLogger("ragloop.service.worker")

TIER1, TIER2, TIER3 = "heuristic", "llm_judge", "human"
GOLDEN_TTL_S = 60.0
SWEEP_EVERY_S = 30.0


def sampled(answer_id: str, salt: str, rate: float) -> bool:
    """A deterministic coin per (answer, purpose): a retried job makes the same routing decision."""
    if rate <= 0:
        return False
    h = int.from_bytes(hashlib.sha256(f"{salt}:{answer_id}".encode()).digest()[:8], "big")
    return h / 2**64 < rate


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class Processed:
    job: Job
    outcome: str  # completed | retry | failed | lease_lost


class EvaluationWorker:
    def __init__(
        self,
        store: Store,
        config: ServiceConfig,
        *,
        judge: Judge | None = None,
        support_scorer: Scorer | None = None,
        model: HeuristicModel = PRIOR,
        metrics: ServiceMetrics | None = None,
        worker_id: str | None = None,
        job_delay_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.config = config
        self.judge = judge
        self.support_scorer = support_scorer
        self.model = model
        self.metrics = metrics
        self.worker_id = worker_id or default_worker_id()
        self.job_delay_s = job_delay_s
        self.clock = clock
        self.intake = ReviewIntake(store, config, tier2=TIER2, tier3=TIER3)
        self._golden: tuple[float, dict[str, str]] | None = None
        self._last_sweep = -1e18
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.processed = 0

    @property
    def tiers(self) -> list[str]:
        return [TIER1, TIER2] if self.judge is not None else [TIER1]

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
                await self._guarded(self.sweep_dead_letters)
                await self._guarded(self.intake.select_due)
            result = await self._guarded(self.run_once)
            if isinstance(result, Processed):
                done += 1
                if max_jobs is not None and done >= max_jobs:
                    break
                continue
            if drain and result is None:
                break
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.poll_interval_s)
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
        if self.job_delay_s:
            await asyncio.sleep(self.job_delay_s)
        beat = asyncio.create_task(self._heartbeat(job))
        try:
            if job.tier == TIER1:
                outcome = await self._tier1(job)
            elif job.tier == TIER2:
                outcome = await self._tier2(job)
            else:
                outcome = await asyncio.to_thread(self._fail, job, f"workers do not process {job.tier!r} jobs", False)
        except LeaseLostError as exc:
            log.warning("job %s (%s): lease lost, result discarded: %s", job.job_id, job.tier, exc)
            outcome = "lease_lost"
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("job %s (%s) attempt %d failed: %s", job.job_id, job.tier, job.attempts, error[:300])
            try:
                outcome = await asyncio.to_thread(self._fail, job, error, True)
            except LeaseLostError:
                outcome = "lease_lost"
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await beat
        self.processed += 1
        if self.metrics is not None:
            self.metrics.evaluation_seconds.labels(job.tier).observe(time.perf_counter() - start)
            if outcome == "retry":
                self.metrics.job_retries.labels(job.tier).inc()
        return Processed(job, outcome)

    async def _heartbeat(self, job: Job) -> None:
        every = max(0.5, self.config.lease_seconds / 3)
        while True:
            await asyncio.sleep(every)
            assert job.lease_token is not None
            await asyncio.to_thread(
                self.store.queue.extend_lease, job.job_id, self.worker_id, job.lease_token, self.config.lease_seconds
            )

    def _count(self, tier: str, status: str) -> None:
        if self.metrics is not None:
            self.metrics.evaluations.labels(tier, status).inc()

    def _fail(self, job: Job, error: str, retry: bool) -> str:
        """Record a failed attempt; on the last one, write the failed evaluation with the dead letter."""
        assert job.lease_token is not None
        last = not retry or job.attempts >= job.max_attempts
        with self.store.db.transaction():
            if last and job.tier in (TIER1, TIER2):
                self.store.evaluations.add(
                    job.answer_id,
                    job.tier,
                    status="failed",
                    error=f"gave up after {job.attempts} attempt(s): {error}"[:4000],
                    evaluator_model=self._evaluator_name(job.tier),
                )
            self.store.queue.fail(job.job_id, self.worker_id, job.lease_token, error, retry=retry)
        if last:
            self._count(job.tier, "failed")
        return "failed" if last else "retry"

    def _evaluator_name(self, tier: str) -> str:
        if tier == TIER1:
            return f"heuristic:{self.model.version}"
        return self.judge.name if self.judge is not None else "judge:none"

    # ------------------------------------------------------------------ tier 1

    async def _tier1(self, job: Job) -> str:
        p = job.payload
        item = Tier1Input(
            question=str(p.get("question", "")),
            answer=str(p.get("answer", "")),
            contexts=_contexts(p),
            retrieval_scores=[float(x) for x in p.get("retrieval_scores", [])],
            refused=bool(p.get("refused", False)),
        )
        feats = await compute_features(item, self.support_scorer)
        score = self.model.score(feats.values)
        golden = await asyncio.to_thread(self._golden_reference, item.question)
        reasons: list[str] = []
        if sampled(job.answer_id, "tier2", self.config.tier2_sample_rate):
            reasons.append("random_sample")
        if score < self.config.tier2_threshold:
            reasons.append("low_heuristic_score")
        if golden is not None:
            reasons.append("golden_set")
        human = sampled(job.answer_id, "tier3", self.config.tier3_sample_rate)
        evidence = {
            "least_supported_claim": feats.least_supported_claim,
            "n_claims": feats.n_claims,
            "routed_to": [TIER2] * bool(reasons) + [TIER3] * human,
            "tier2_reasons": reasons,
            **feats.extra,
        }
        assert job.lease_token is not None
        token = job.lease_token

        def commit() -> None:
            with self.store.db.transaction():
                self.store.evaluations.add(
                    job.answer_id,
                    TIER1,
                    heuristic_score=round(score, 4),
                    scores=feats.as_scores(),
                    failure_evidence=evidence,
                    evaluator_model=f"heuristic:{self.model.version}",
                )
                if reasons:
                    self.store.queue.enqueue(
                        job.answer_id, TIER2, {**p, "reasons": reasons, "reference": golden, "heuristic_score": score}
                    )
                if human:
                    self.store.queue.enqueue(job.answer_id, TIER3, {"reasons": ["random_sample"]})
                self.store.queue.complete(job.job_id, self.worker_id, token)

        await asyncio.to_thread(commit)
        self._count(TIER1, "completed")
        return "completed"

    def _golden_reference(self, question: str) -> str | None:
        now = self.clock()
        if self._golden is None or now - self._golden[0] > GOLDEN_TTL_S:
            entries = self.store.golden.current_golden_set()
            self._golden = (now, {question_hash(e.question): e.expected_answer for e in entries})
        return self._golden[1].get(question_hash(question))

    # ------------------------------------------------------------------ tier 2

    async def _tier2(self, job: Job) -> str:
        if self.judge is None:  # not claimed without a judge; defensive
            raise RuntimeError("no judge configured in this worker")
        p = job.payload
        if "answer" not in p:  # queued by feedback before tier 1 stored its payload
            p = await asyncio.to_thread(self._payload_for, job.answer_id)
        item = JudgeInput(
            question=str(p.get("question", "")),
            answer=str(p.get("answer", "")),
            contexts=_contexts(p),
            refused=bool(p.get("refused", False)),
            reference=p.get("reference") or None,
        )
        result = await self.judge.evaluate(item)
        overall = result.overall
        assert job.lease_token is not None
        token = job.lease_token

        def commit() -> None:
            with self.store.db.transaction():
                tier1 = self.store.evaluations.latest(job.answer_id, TIER1)
                h = tier1.heuristic_score if tier1 is not None and tier1.status == "completed" else None
                disagreement = abs(overall - h) if overall is not None and h is not None else None
                candidate = disagreement is not None and self.intake.offer(job.answer_id, disagreement)
                evidence = dict(result.evidence)
                evidence.update(
                    overall=overall,
                    heuristic_score=h,
                    disagreement=disagreement,
                    reasons=p.get("reasons", []),
                    review_candidate=candidate,
                )
                self.store.evaluations.add(
                    job.answer_id,
                    TIER2,
                    scores={k: (round(v, 4) if v is not None else None) for k, v in result.scores.items()},
                    failure_evidence=evidence,
                    evaluator_model=self.judge.name if self.judge else None,
                )
                self.store.queue.complete(job.job_id, self.worker_id, token)

        await asyncio.to_thread(commit)
        self._count(TIER2, "completed")
        return "completed"

    def _payload_for(self, answer_id: str) -> dict[str, Any]:
        for j in self.store.queue.for_answer(answer_id):
            if j.tier == TIER1 and "answer" in j.payload:
                return dict(j.payload)
        raise NotFoundError(f"answer {answer_id} has no stored evaluation payload")

    # ------------------------------------------------------------------ dead letters

    def sweep_dead_letters(self, limit: int = 200) -> int:
        """Write the failed evaluation for dead tier-1/tier-2 jobs that have none (lease expired on the
        last attempt). Returns how many it wrote."""
        written = 0
        for dead in self.store.queue.dead_letters(limit=limit):
            if dead.tier not in (TIER1, TIER2):
                continue
            with self.store.db.transaction() as s:
                row = s.scalar(select(EvaluationJob).where(EvaluationJob.job_id == dead.job_id).with_for_update())
                if row is None or row.status != "dead":
                    continue
                have = s.scalar(
                    select(Evaluation.eval_id)
                    .where(Evaluation.answer_id == dead.answer_id, Evaluation.evaluation_tier == dead.tier)
                    .limit(1)
                )
                if have is not None:
                    continue
                self.store.evaluations.add(
                    dead.answer_id,
                    dead.tier,
                    status="failed",
                    error=f"dead letter: {dead.dead_reason or dead.last_error or 'unknown'}"[:4000],
                    evaluator_model=self._evaluator_name(dead.tier),
                )
                written += 1
        if written:
            log.warning("recorded %d failed evaluations for dead-lettered jobs", written)
        return written


def _contexts(payload: dict[str, Any]) -> list[str]:
    sources = payload.get("sources") or []
    if sources:
        return [str(s.get("text", "")) for s in sources if isinstance(s, dict)]
    return [str(r.get("text", "")) for r in payload.get("retrieved") or [] if isinstance(r, dict)]
