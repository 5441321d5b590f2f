"""The diagnosis pass: which served answers to diagnose, and diagnosing them exactly once.

A diagnosis is a job of the durable evaluation queue (tier `diagnosis`, one per answer), so it gets
the queue's leases, retries with backoff and dead letters, and any number of workers (the service's
embedded one, `ragloop worker`s, a manual `ragloop improve run`) can share the work:

- **Selection** (`select`): answers with a reason and no diagnosis (`Diagnoses.candidates`):
  negative feedback, a correction, a tier-1 score below `heuristic_threshold` (the tier-2 routing
  threshold), a tier-2 judgement below `judge_threshold`. An answer with nothing to diagnose
  against (no correction, reference or judge answer) is recorded `skipped`, not queued: the oracle
  needs an ideal answer, and selection picks it up again once a correction arrives. The feedback
  route and tier 2 queue a diagnosis directly (`request_diagnosis`).
- **Diagnosis** (`process`): the served answer (`served.load_served`), the collection whose index
  served it, the pipeline config of the version that served it (its retrieval replayed for ranks
  beyond the served ones), then `Diagnoser` (assessment, oracle, decision tree), bounded by
  `timeout_s`.
- **Exactly once**: the verdict, the replayable input, the knowledge-gap entry, the proposed actions
  (`improvement_actions`, idempotent) and `complete()` commit in one transaction under the job's
  lease; a lost lease rolls all of it back.
- **Failures are recorded, then retried**: a scorer (judge) that raises, a diagnosis that runs past
  `timeout_s`, or a paraphrase model that failed (its offline stand-ins recorded in the variants) on
  an attempt that is not the last, each leave the diagnosis `retrying` with the attempt count and
  the error, and the job queued with backoff; after the last attempt the diagnosis is `failed`
  with the error, never silently dropped (jobs whose worker died are swept into `failed` too).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractContextManager
from typing import Any

from ragloop.config import PipelineConfig, Settings
from ragloop.improve.diagnosis import Diagnoser
from ragloop.improve.engine_config import DiagnosisConfig, Done, Outcome, ParaphraseFailedError, PassReport
from ragloop.improve.evaluate import Outcome as JobOutcome
from ragloop.improve.gaps import ChatQuestions, GapLogger, GapOccurrence, PreparedGap, QuestionWriter
from ragloop.improve.oracle import OracleRetriever, ranked_chunks
from ragloop.improve.paraphrase import ChatParaphraser, OfflineParaphraser, Paraphraser, Vocabulary
from ragloop.improve.proposals import Context, spec_for
from ragloop.improve.served import Collections, ServedAnswer, load_served, pipeline_config, ranking
from ragloop.improve.types import Diagnosis, DiagnosisInput, FailureMode, KnowledgeGapEvidence, Thresholds
from ragloop.models.chat.calllog import CallPurpose, CallScope, call_scope
from ragloop.models.scoring import make_scorer
from ragloop.models.scoring.base import Scorer
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever
from ragloop.retrieval.variants import index_for
from ragloop.store import Job, LeaseLostError, NotFoundError, Store
from ragloop.store.vocabulary import DiagnosisStatus, JobStatus, Tier

log = logging.getLogger("ragloop.improve")

DIAGNOSIS_TIER = Tier.DIAGNOSIS
PARAPHRASE_FAILED = "chat model failed"


def job_call_scope(job: Job) -> AbstractContextManager[CallScope]:
    """Attribute the model calls made for an evaluation or diagnosis job (judge, scorer, paraphrases, gap
    questions) to the job's answer in the call log, under the job's tier as purpose and its id as run id."""
    purpose = CallPurpose(job.tier) if job.tier in {p.value for p in CallPurpose} else None
    return call_scope(answer_id=job.answer_id, run_id=job.job_id, purpose=purpose)


def request_diagnosis(store: Store, answer_id: str, reasons: list[str]) -> Job:
    """Open the answer's diagnosis and queue its job (idempotent; joins the caller's transaction). A
    diagnosis job that died (e.g. skipped for want of an ideal answer) is queued again."""
    with store.db.transaction():
        row = store.diagnoses.open(answer_id, reasons=reasons)
        if row.status == DiagnosisStatus.SKIPPED:  # something new to diagnose against may have arrived (a correction)
            store.diagnoses.reopen(answer_id, reasons[0] if reasons else "requested")
        job = store.queue.enqueue(answer_id, DIAGNOSIS_TIER, {"reasons": reasons})
        if job.status == JobStatus.DEAD:
            job = store.queue.requeue(job.job_id)
        return job


class DiagnosisEngine:
    """One per worker (or pass): caches opened collections, oracles and the scorer."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        config: DiagnosisConfig | None = None,
        *,
        scorer: Scorer | None = None,
        thresholds: Thresholds | None = None,
        chat_model: Any = None,
    ) -> None:
        """`scorer`: default `make_scorer(config.scorer)`; `chat_model` writes paraphrases and gap questions
        (default: the served pipeline's `agent.chat_model`, none offline)."""
        self.store = store
        self.settings = settings
        self.config = config or DiagnosisConfig()
        self.thresholds = thresholds or Thresholds()
        self.collections = Collections(settings, self.config.default_collection)
        self._scorer = scorer
        self._embedders: dict[str, Any] = {}
        self._oracles: dict[tuple[str, int, str], tuple[Diagnoser, Retriever]] = {}
        self._chat: dict[str, Any] = {}
        self._chat_override = chat_model

    # ------------------------------------------------------------------ selection

    def select(self, limit: int | None = None) -> tuple[int, int]:
        """Queue a diagnosis for every candidate with an ideal answer; skip the others. (queued, skipped)."""
        queued = skipped = 0
        cands = self.store.diagnoses.candidates(
            heuristic_threshold=self.config.heuristic_threshold,
            judge_threshold=self.config.judge_threshold,
            limit=limit or self.config.select_limit,
        )
        for c in cands:
            served = load_served(self.store, c.answer_id)
            if served is None:
                continue
            if served.ideal is None:
                self.store.diagnoses.skip(
                    c.answer_id, "no ideal answer yet (no correction or reference)", reasons=c.reasons
                )
                skipped += 1
                continue
            with self.store.db.transaction():
                self.store.diagnoses.open(
                    c.answer_id, reasons=c.reasons, ideal_answer=served.ideal.text, ideal_source=served.ideal.source
                )
                request_diagnosis(self.store, c.answer_id, list(c.reasons))
            queued += 1
        return queued, skipped

    # ------------------------------------------------------------------ the pass

    async def run_pass(self, worker_id: str, *, max_jobs: int | None = None) -> PassReport:
        """Select, sweep dead jobs, then diagnose every due diagnosis job (or `max_jobs` of them)."""
        report = PassReport()
        report.selected, report.skipped = await asyncio.to_thread(self.select)
        report.swept = await asyncio.to_thread(self.sweep_dead)
        done = 0
        while max_jobs is None or done < max_jobs:
            job = await asyncio.to_thread(
                self.store.queue.claim, worker_id, self.config.lease_seconds, tiers=[DIAGNOSIS_TIER]
            )
            if job is None:
                break
            result = await self.process_job(job, worker_id)
            done += 1
            report.outcomes[result.outcome] += 1
            if result.mode is not None:
                report.modes[result.mode] += 1
            report.gaps_logged += result.gap
            report.actions_proposed += result.actions
            if result.outcome in (Outcome.RETRY, Outcome.FAILED):
                row = await asyncio.to_thread(self.store.diagnoses.get, job.answer_id)
                report.errors.append(f"{job.answer_id}: {row.error if row else '?'}")
        return report

    async def process(self, job: Job, worker_id: str) -> JobOutcome:
        """For the evaluation worker: the outcome in the evaluator's terms (a skip settled the job: completed)."""
        done = (await self.process_job(job, worker_id)).outcome
        return JobOutcome.COMPLETED if done is Outcome.SKIPPED else JobOutcome(str(done))

    async def process_job(self, job: Job, worker_id: str) -> Done:
        with job_call_scope(job):
            return await self._process_job(job, worker_id)

    async def _process_job(self, job: Job, worker_id: str) -> Done:
        try:
            served = await asyncio.to_thread(load_served, self.store, job.answer_id)
            if served is None:
                raise NotFoundError(f"answer {job.answer_id} is gone")
            if served.ideal is None:
                await asyncio.to_thread(self._skip, job, worker_id)
                return Done(Outcome.SKIPPED)
            try:
                coll, inp, diag = await asyncio.wait_for(self._diagnose(served), self.config.timeout_s)
            except TimeoutError:
                raise TimeoutError(f"the diagnosis ran past {self.config.timeout_s:g} s") from None
            failed = sorted({v.source for v in inp.oracle.variants if PARAPHRASE_FAILED in v.source})
            if failed and job.attempts < job.max_attempts:
                raise ParaphraseFailedError(f"paraphrases fell back to offline variants: {'; '.join(failed)}")
            prepared = await self._prepare_gap(served, coll, diag) if diag.mode is FailureMode.KNOWLEDGE_GAP else None
            n = await asyncio.to_thread(self._commit, job, worker_id, served, coll, inp, diag, prepared)
            return Done(Outcome.COMPLETED, diag.mode, prepared is not None, n)
        except LeaseLostError as exc:
            log.warning("diagnosis of %s: lease lost, result discarded: %s", job.answer_id, exc)
            return Done(Outcome.LEASE_LOST)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("diagnosis of %s, attempt %d failed: %s", job.answer_id, job.attempts, error[:300])
            try:
                return Done(await asyncio.to_thread(self._fail, job, worker_id, error))
            except LeaseLostError:
                return Done(Outcome.LEASE_LOST)

    # ------------------------------------------------------------------ diagnosing

    async def _diagnose(self, served: ServedAnswer) -> tuple[Collection, DiagnosisInput, Diagnosis]:
        coll = await asyncio.to_thread(self.collections.resolve, served)
        config = await asyncio.to_thread(pipeline_config, self.store, served.pipeline_version)
        diagnoser, replayer = await asyncio.to_thread(self._diagnoser, coll, config)
        max_rank = self.thresholds.max_rank
        replay = await asyncio.to_thread(replayer.retrieve, served.query, max_rank)
        retrieval = ranking(served.served, ranked_chunks(replay, max_rank), max_rank)
        assert served.ideal is not None
        inp, diag = await diagnoser.diagnose(
            served.standalone,
            served.ideal.text,
            served.answer,
            retrieval,
            config.retrieval.k,
            served.contexts,
            refused=served.refused,
        )
        return coll, inp, diag

    def scorer(self) -> Scorer:
        if self._scorer is None:
            self._scorer = make_scorer(self.config.scorer, self.settings, calls=self.store.model_calls)
        return self._scorer

    def _chat_model(self, name: str | None) -> Any:
        if self._chat_override is not None:
            return self._chat_override
        if not name:
            return None
        if name not in self._chat:
            from ragloop.models.chat import make_wrapped

            self._chat[name] = make_wrapped(name, self.settings, sink=self.store.model_calls)
        return self._chat[name]

    def _diagnoser(self, primary: Collection, config: PipelineConfig) -> tuple[Diagnoser, Retriever]:
        coll = index_for(primary, config)  # the index the answer's version served from
        gen = coll.load()
        key = (coll.name, gen.manifest.generation, config.version_id)
        cached = self._oracles.get(key)
        if cached is not None:
            return cached
        embedder = self._embedders.get(coll.name)
        if embedder is None:
            embedder = self._embedders[coll.name] = Retriever(coll, config.retrieval).embedder
        paraphraser: Paraphraser | None = None
        chat = self._chat_model(config.agent.chat_model)
        if chat is not None:
            paraphraser = ChatParaphraser(chat, OfflineParaphraser(Vocabulary.from_chunks(gen.chunks)))
        oracle = OracleRetriever(
            coll, self.scorer(), config=config.retrieval, embedder=embedder, paraphraser=paraphraser
        )
        replayer = Retriever(coll, config.retrieval, embedder=embedder)
        self._oracles = {k: v for k, v in self._oracles.items() if k[:2] == key[:2]}  # drop older generations
        self._oracles[key] = (Diagnoser(oracle, self.scorer(), self.thresholds), replayer)
        return self._oracles[key]

    async def _prepare_gap(self, served: ServedAnswer, coll: Collection, diag: Diagnosis) -> PreparedGap:
        ev = diag.evidence
        best_id, best_score = (
            (ev.best_chunk_id, ev.best_score) if isinstance(ev, KnowledgeGapEvidence) else (None, None)
        )
        config = await asyncio.to_thread(pipeline_config, self.store, served.pipeline_version)
        chat = self._chat_model(config.agent.chat_model)
        writer: QuestionWriter | None = ChatQuestions(chat) if chat is not None else None
        logger = GapLogger(self.store, embedder=self._embedders.get(coll.name), writer=writer)
        occ = GapOccurrence(
            collection=coll.name,
            answer_id=served.answer_id,
            question=served.standalone,
            ideal_answer=served.ideal.text if served.ideal else None,
            best_chunk_id=best_id,
            best_score=best_score,
            evidence=ev.model_dump(mode="json"),
        )
        return await logger.prepare(occ)

    # ------------------------------------------------------------------ committing

    def _commit(
        self,
        job: Job,
        worker_id: str,
        served: ServedAnswer,
        coll: Collection,
        inp: DiagnosisInput,
        diag: Diagnosis,
        prepared: PreparedGap | None,
    ) -> int:
        assert job.lease_token is not None and served.ideal is not None
        store = self.store
        with store.db.transaction():
            store.diagnoses.open(job.answer_id, reasons=list(job.payload.get("reasons") or []))
            gap = GapLogger(store).log(prepared) if prepared is not None else None
            ctx = Context(
                answer_id=job.answer_id,
                question=served.standalone,
                collection=coll.name,
                pipeline_version=served.pipeline_version,
                generation=coll.generation(),
                user_reported=served.user_reported,
                gap_id=gap.gap_id if gap is not None else None,
            )
            actions: list[dict[str, Any]] = []
            for proposed in diag.actions:
                spec = spec_for(proposed, diag, ctx)
                entry = proposed.model_dump(mode="json")
                if spec is not None:
                    p = store.improvement_actions.propose(
                        spec.kind,
                        spec.component,
                        spec.dedupe_key,
                        domain=spec.domain,
                        answer_ids=[job.answer_id],
                        evidence=spec.evidence,
                        payload=spec.payload,
                        priority=spec.priority,
                    )
                    entry.update(action_id=p.action.action_id, component=spec.component, status=p.action.status)
                actions.append(entry)
            store.diagnoses.complete(
                job.answer_id,
                failure_mode=str(diag.mode),
                confidence=diag.confidence,
                evidence=diag.evidence.model_dump(mode="json"),
                actions=actions,
                rule=diag.rule[:255],
                diagnosis_input=inp.model_dump(mode="json"),
                ideal_answer=served.ideal.text,
                ideal_source=str(served.ideal.source),
                collection=coll.name,
                pipeline_version=served.pipeline_version,
            )
            store.queue.complete(job.job_id, worker_id, job.lease_token)
        return len(actions)

    def _fail(self, job: Job, worker_id: str, error: str) -> Outcome:
        assert job.lease_token is not None
        last = job.attempts >= job.max_attempts
        with self.store.db.transaction():
            self.store.diagnoses.open(job.answer_id)
            self.store.diagnoses.fail(job.answer_id, f"attempt {job.attempts}/{job.max_attempts}: {error}", final=last)
            self.store.queue.fail(job.job_id, worker_id, job.lease_token, error, retry=True)
        return Outcome.FAILED if last else Outcome.RETRY

    def _skip(self, job: Job, worker_id: str) -> None:
        """Nothing to diagnose against: the diagnosis is skipped and the job dead-lettered with the reason
        (`request_diagnosis` queues it again when a correction arrives)."""
        assert job.lease_token is not None
        reason = "no ideal answer yet (no correction or reference)"
        with self.store.db.transaction():
            self.store.diagnoses.skip(job.answer_id, reason)
            self.store.queue.fail(job.job_id, worker_id, job.lease_token, reason, retry=False)

    def sweep_dead(self, limit: int = 200) -> int:
        """Diagnoses whose job died without a verdict (the worker crashed on the last attempt): failed."""
        n = 0
        for dead in self.store.queue.dead_letters(limit=limit):
            if dead.tier != DIAGNOSIS_TIER:
                continue
            row = self.store.diagnoses.get(dead.answer_id)
            if row is not None and row.status in (DiagnosisStatus.PENDING, DiagnosisStatus.RETRYING):
                self.store.diagnoses.fail(
                    dead.answer_id, f"dead letter: {dead.dead_reason or dead.last_error or 'unknown'}", final=True
                )
                n += 1
        return n

    def close(self) -> None:
        self.collections.close()
        self._oracles.clear()
