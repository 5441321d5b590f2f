"""Online evaluation of one claimed job, tier by tier: what is computed, written and routed.

- **Tier 1** (`Tier.HEURISTIC`, every answer): the features and linear model of `tier1.py`. In the
  same transaction as the evaluation it routes the answer on (`routing.route_tier1`): to tier 2 (a
  `llm_judge` job) when it is in the random sample, scores below the threshold, or asks a
  golden-set question; to tier 3 (a `human` review job) by a smaller random sample. Negative
  feedback routes to tier 2 from the feedback route, and detailed feedback to tier 3
  (`routing.route_feedback`).
- **Tier 2** (`Tier.LLM_JUDGE`): the configured judge (`judge.py`). A judge that fails is retried
  with backoff; on the last attempt a *failed* evaluation is written together with the dead letter,
  so no answer is ever silently left unjudged. A tier-2 score that disagrees with tier 1 by more
  than the threshold makes the answer a review candidate; each day's highest go to human review,
  capped (`review_intake.py`).
- **Only a qualified judge counts** (`ragloop.experiments.judges.judge_standing`, issue 13's evaluator
  drift): a tier-2 score by a judge other than the accepted one (or, before any is accepted, the
  incumbent) is written with status `unqualified`, with the reason in its evidence; every decision
  that reads tier-2 scores reads `completed` rows only. The standing is read again every
  `STANDING_TTL_S`, so a `ragloop drift qualify` reaches running workers.
- **Exactly once**: the evaluation, any follow-up jobs and `complete()` commit in one transaction
  under the job's lease. A worker killed mid-job (even mid-transaction) leaves the job leased; the
  lease expires and the next claim redoes it from scratch.
- Jobs that died of lease expiry on their last attempt (a worker crashing every time) get their
  failed evaluation from `sweep_dead_letters()`, which every worker runs now and then.

`OnlineEvaluator.process(job, worker_id)` is the whole of it for one job; the service's
`EvaluationWorker` is only the loop around it (claiming, lease heartbeats, threads, metrics), in
`ragloop serve` or in `ragloop worker` processes. Human (`human`) and candidate jobs are never
claimed: they wait for `/v1/review` and for the day's end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from enum import StrEnum

from ragloop.experiments.drift import Pin
from ragloop.experiments.judges import JudgeStanding, judge_standing
from ragloop.improve.judge import Judge
from ragloop.improve.payload import EvaluationPayload, answer_payload
from ragloop.improve.recalibration import MODEL_TTL_S, active_model
from ragloop.improve.review_intake import ReviewIntake
from ragloop.improve.routing import RoutingConfig, RoutingReason, disagreement, route_tier1
from ragloop.improve.tier1 import HeuristicModel
from ragloop.improve.tier1_cache import Tier1Cache, cached_features
from ragloop.models.scoring.base import Scorer
from ragloop.store import Job, LeaseLostError, NotFoundError, Store, question_hash
from ragloop.store.vocabulary import AUTOMATIC_TIERS, EvaluationStatus, Tier

log = logging.getLogger("ragloop.improve.evaluate")

GOLDEN_TTL_S = 60.0
STANDING_TTL_S = 60.0


class Outcome(StrEnum):
    """What became of one processed job."""

    COMPLETED = "completed"
    RETRY = "retry"
    """Failed; queued again after a backoff."""
    FAILED = "failed"
    """Failed for the last time: dead-lettered, with a failed evaluation for tier 1 and tier 2."""
    LEASE_LOST = "lease_lost"
    """The lease ran out first: the result was discarded; whoever holds the job now redoes it."""


class OnlineEvaluator:
    """Evaluates claimed tier-1 and tier-2 jobs against one store. Thread-safe for one event loop."""

    def __init__(
        self,
        store: Store,
        config: RoutingConfig,
        *,
        judge: Judge | None = None,
        support_scorer: Scorer | None = None,
        model: HeuristicModel | None = None,
        clock: Callable[[], float] = time.monotonic,
        tier1_cache: Tier1Cache | None = None,
    ) -> None:
        """`model`: a fixed tier-1 model; None (the service) reads the active one from the store
        (`recalibration.active_model`) again every `MODEL_TTL_S`, so a recalibration reaches every worker.
        `tier1_cache`: tier-1 features of inputs seen before (`tier1_cache.py`; None: always computed)."""
        self.store = store
        self.config = config
        self.judge = judge
        self.support_scorer = support_scorer
        self.tier1_cache = tier1_cache
        self._fixed_model = model
        self._model: tuple[float, HeuristicModel] | None = None
        self.clock = clock
        self.intake = ReviewIntake(store, config)
        self._golden: tuple[float, dict[str, str]] | None = None
        self._standing: tuple[float, JudgeStanding] | None = None

    def judge_standing(self) -> JudgeStanding | None:
        """Whether this worker's judge may count (None: no judge); re-read every `STANDING_TTL_S`."""
        if self.judge is None:
            return None
        now = self.clock()
        if self._standing is None or now - self._standing[0] > STANDING_TTL_S:
            p = self.judge.pin
            standing = judge_standing(self.store, Pin(p.model, p.version, p.prompt_sha))
            if not standing.qualified and (self._standing is None or self._standing[1].qualified):
                log.warning("judge %s %s is not qualified: its scores will not count (%s)", p.model, p.version,
                            standing.reason)  # fmt: skip
            self._standing = (now, standing)
        return self._standing[1]

    @property
    def model(self) -> HeuristicModel:
        """The tier-1 model that scores now."""
        if self._fixed_model is not None:
            return self._fixed_model
        now = self.clock()
        if self._model is None or now - self._model[0] > MODEL_TTL_S:
            self._model = (now, active_model(self.store))
        return self._model[1]

    @property
    def tiers(self) -> list[Tier]:
        """The tiers this evaluator can process (tier 2 only with a judge)."""
        return [Tier.HEURISTIC, Tier.LLM_JUDGE] if self.judge is not None else [Tier.HEURISTIC]

    async def process(self, job: Job, worker_id: str) -> Outcome:
        """Evaluate one job leased to `worker_id`: write its result, follow-up jobs and completion in
        one transaction, or record the failed attempt (and, on the last one, the failed evaluation)."""
        try:
            if job.tier == Tier.HEURISTIC:
                return await self._tier1(job, worker_id)
            if job.tier == Tier.LLM_JUDGE:
                return await self._tier2(job, worker_id)
            error = f"workers do not process {job.tier!r} jobs"
            return await asyncio.to_thread(self._fail, job, worker_id, error, False)
        except LeaseLostError as exc:
            log.warning("job %s (%s): lease lost, result discarded: %s", job.job_id, job.tier, exc)
            return Outcome.LEASE_LOST
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("job %s (%s) attempt %d failed: %s", job.job_id, job.tier, job.attempts, error[:300])
            try:
                return await asyncio.to_thread(self._fail, job, worker_id, error, True)
            except LeaseLostError:
                return Outcome.LEASE_LOST

    def _fail(self, job: Job, worker_id: str, error: str, retry: bool) -> Outcome:
        """Record a failed attempt; on the last one, write the failed evaluation with the dead letter."""
        assert job.lease_token is not None
        last = not retry or job.attempts >= job.max_attempts
        with self.store.db.transaction():
            if last and job.tier in AUTOMATIC_TIERS:
                self.store.evaluations.add(
                    job.answer_id,
                    job.tier,
                    status=EvaluationStatus.FAILED,
                    error=f"gave up after {job.attempts} attempt(s): {error}"[:4000],
                    evaluator_model=self.evaluator_name(job.tier),
                )
            self.store.queue.fail(job.job_id, worker_id, job.lease_token, error, retry=retry)
        return Outcome.FAILED if last else Outcome.RETRY

    def evaluator_name(self, tier: str) -> str:
        """The `evaluator_model` recorded for `tier`'s evaluations."""
        if tier == Tier.HEURISTIC:
            return f"heuristic:{self.model.version}"
        return self.judge.name if self.judge is not None else "judge:none"

    # ------------------------------------------------------------------ tier 1

    async def _tier1(self, job: Job, worker_id: str) -> Outcome:
        p = EvaluationPayload.load(job.payload)
        item = p.tier1_input()
        feats = await cached_features(item, self.support_scorer, self.tier1_cache)
        model = await asyncio.to_thread(lambda: self.model)
        score = model.score(feats.values)
        golden = await asyncio.to_thread(self._golden_reference, item.question)
        route = route_tier1(job.answer_id, score, golden=golden is not None, config=self.config)
        evidence = {
            "least_supported_claim": feats.least_supported_claim,
            "n_claims": feats.n_claims,
            "routed_to": route.routed_to,
            "tier2_reasons": route.tier2_reasons,
            **feats.extra,
        }
        assert job.lease_token is not None
        token = job.lease_token

        def commit() -> None:
            with self.store.db.transaction():
                self.store.evaluations.add(
                    job.answer_id,
                    Tier.HEURISTIC,
                    heuristic_score=round(score, 4),
                    scores=feats.as_scores(),
                    failure_evidence=evidence,
                    evaluator_model=f"heuristic:{model.version}",
                )
                if route.tier2_reasons:
                    judged = p.model_copy(
                        update={"reasons": list(route.tier2_reasons), "reference": golden, "heuristic_score": score}
                    )
                    self.store.queue.enqueue(job.answer_id, Tier.LLM_JUDGE, judged.stored())
                if route.human:
                    self.store.queue.enqueue(job.answer_id, Tier.HUMAN, {"reasons": [RoutingReason.RANDOM_SAMPLE]})
                self.store.queue.complete(job.job_id, worker_id, token)

        await asyncio.to_thread(commit)
        return Outcome.COMPLETED

    def _golden_reference(self, question: str) -> str | None:
        now = self.clock()
        if self._golden is None or now - self._golden[0] > GOLDEN_TTL_S:
            # not the held-out share: its answers must not steer the scores remediation acts on
            entries = self.store.golden.current_golden_set(include_held_out=False)
            self._golden = (now, {question_hash(e.question): e.expected_answer for e in entries})
        return self._golden[1].get(question_hash(question))

    # ------------------------------------------------------------------ tier 2

    async def _tier2(self, job: Job, worker_id: str) -> Outcome:
        if self.judge is None:  # not claimed without a judge; defensive
            raise RuntimeError("no judge configured in this worker")
        judge = self.judge
        p = EvaluationPayload.load(job.payload)
        if not p.carries_answer:  # queued by feedback before tier 1 stored its payload
            p = (await asyncio.to_thread(self._payload_for, job.answer_id)).model_copy(update={"reasons": p.reasons})
        item = p.judge_input()
        result = await judge.evaluate(item)
        overall = result.overall
        standing = await asyncio.to_thread(self.judge_standing)
        counts = standing is None or standing.qualified
        assert job.lease_token is not None
        token = job.lease_token

        def commit() -> None:
            with self.store.db.transaction():
                tier1 = self.store.evaluations.latest(job.answer_id, Tier.HEURISTIC)
                h = tier1.heuristic_score if tier1 is not None and tier1.status == EvaluationStatus.COMPLETED else None
                gap = disagreement(overall, h)
                if RoutingReason.NEGATIVE_FEEDBACK in p.reasons and overall is not None:
                    # a user's negative rating reads as a score of 0: a judge that scores the answer
                    # well disagrees with the user, and a person should settle it (the review's
                    # correction is what diagnosis needs; the rating alone names no ideal answer)
                    gap = max(gap or 0.0, overall)
                # an unqualified judge's disagreement is no evidence: it sends nobody to review
                candidate = counts and gap is not None and self.intake.offer(job.answer_id, gap)
                evidence = dict(result.evidence)
                evidence.update(
                    overall=overall,
                    heuristic_score=h,
                    disagreement=gap,
                    reasons=list(p.reasons),
                    review_candidate=candidate,
                )
                if standing is not None and not standing.qualified:
                    evidence["judge_standing"] = standing.to_json()
                self.store.evaluations.add(
                    job.answer_id,
                    Tier.LLM_JUDGE,
                    status=EvaluationStatus.COMPLETED if counts else EvaluationStatus.UNQUALIFIED,
                    scores={k: (round(v, 4) if v is not None else None) for k, v in result.scores.items()},
                    failure_evidence=evidence,
                    evaluator_model=judge.name,
                    evaluator_version=judge.pin.version,
                    evaluator_prompt_sha=judge.pin.prompt_sha,
                )
                self.store.queue.complete(job.job_id, worker_id, token)

        await asyncio.to_thread(commit)
        return Outcome.COMPLETED

    def _payload_for(self, answer_id: str) -> EvaluationPayload:
        p = answer_payload(self.store, answer_id)
        if p is not None:
            return p
        raise NotFoundError(f"answer {answer_id} has no stored evaluation payload")

    # ------------------------------------------------------------------ dead letters

    def sweep_dead_letters(self, limit: int = 200) -> int:
        """Write the failed evaluation for dead tier-1/tier-2 jobs that have none (lease expired on the
        last attempt). Returns how many it wrote."""
        written = 0
        for dead in self.store.queue.dead_letters(limit=limit):
            if dead.tier not in AUTOMATIC_TIERS:
                continue
            with self.store.db.transaction():
                if self.store.queue.hold_dead(dead.job_id) is None:  # requeued meanwhile
                    continue
                if self.store.evaluations.exists(dead.answer_id, dead.tier):
                    continue
                self.store.evaluations.add(
                    dead.answer_id,
                    dead.tier,
                    status=EvaluationStatus.FAILED,
                    error=f"dead letter: {dead.dead_reason or dead.last_error or 'unknown'}"[:4000],
                    evaluator_model=self.evaluator_name(dead.tier),
                )
                written += 1
        if written:
            log.warning("recorded %d failed evaluations for dead-lettered jobs", written)
        return written
