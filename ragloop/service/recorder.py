"""Stores each answer and queues its tier-1 evaluation *before* the client is given the answer's id.

Why on the request path: an `answer_id` is a promise that feedback, `GET /v1/answers/{id}` and
the evaluation loop can rely on. When the write ran in the background after the response, kill -9
of the server lost 2 of 118 returned answers on PostgreSQL and 7 of 77 on SQLite (another process
held the write lock for 3 s): the client had an id that was never stored and never evaluated.

`AnswerRecorder.store()` commits the query + answer rows and the `heuristic` job in one
transaction (outbox style: neither exists without the other; the same transaction links the model
calls the graph logged under the answer id as run id to the answer) and returns only after the commit;
the callers (`answering.answer_events`, hence both SSE streams) send nothing carrying the id
before it returns. The write runs in a thread, so the event loop keeps serving.

Bounded: `ServiceConfig.answer_write_timeout_s`. Transient failures (lost connection, SQLite
busy, PostgreSQL lock or statement timeout) are retried with short backoff inside that budget;
anything else fails at once. SQLite waits for a competing writer's lock on the store's busy
timeout (`store.db.SQLITE_BUSY_TIMEOUT_S`, longer than this budget), so a lock held for a few
seconds costs latency, not the answer; on PostgreSQL the transaction's `statement_timeout` is set
to what is left of the budget, so a blocked write gives up by itself. When the budget runs out
`AnswerNotStoredError` is raised (the routes answer 503), the answer counts in
`ragloop_answer_persist_failures_total` and is logged: refused, never silently lost.

A thread still writing when the budget runs out is told to give up: just before its commit it
asks the `_Gate`, and an abandoned attempt rolls back, so no answer the client was refused can
appear later. A commit already under way when the budget ends is waited for a little longer
(`COMMIT_GRACE_S`): if it lands the client gets the answer after all. The write is idempotent by
answer id (the answer row is checked first; a job is unique per answer and tier), so a retry after
a commit whose acknowledgement was lost stores nothing twice.

Personal data: the stored copy (question, answer text, trace, residual deficiencies and the job's
payload) goes through the `Redactor` (`ragloop.text.pii`) inside `_write`; the `AnswerRecord` the
client's response is built from is left as it was, so the user sees the answer unchanged. The
diagnosis, the oracle and the judge read the redacted question, as every later reader does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from ragloop import tracing
from ragloop.improve.payload import EvaluationPayload, StoredTrace
from ragloop.models.chat import estimate_tokens
from ragloop.service.metrics import ServiceMetrics
from ragloop.store import Store
from ragloop.store.vocabulary import Tier
from ragloop.text.pii import Redactor, default_redactor

if TYPE_CHECKING:
    from ragloop.agent.api import Answer

log = logging.getLogger("ragloop.service")

DEFAULT_TIMEOUT_S = 10.0
RETRY_DELAYS_S = (0.05, 0.2, 0.5, 1.0)
"""Backoff between attempts (the last repeats), always cut to what is left of the budget."""
COMMIT_GRACE_S = 2.0
"""How long past the budget a commit that had already begun is waited for."""


@dataclass(frozen=True)
class AnswerRecord:
    """Everything stored about one served answer."""

    answer_id: str
    session_id: str
    user_id: str | None
    question: str
    answer: Answer
    latency_ms: int
    degraded: bool = False
    experiment_id: str | None = None
    variant: str | None = None
    """The experiment arm that served it (None outside experiments)."""

    def citations(self) -> list[dict[str, Any]]:
        return [c.model_dump() for c in self.answer.citations]


class AnswerNotStoredError(Exception):
    """The answer could not be stored in time; its id must not reach the client."""

    def __init__(self, answer_id: str, reason: str) -> None:
        super().__init__(f"answer {answer_id} was not stored: {reason}")
        self.answer_id = answer_id
        self.reason = reason


class _Abandoned(Exception):
    """Raised inside the write transaction when the caller has given up: rolls it back."""


class _Gate:
    """Decides, once, whether an attempt may commit or has been given up by its caller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned = False
        self._committing = False

    def begin_commit(self) -> bool:
        """Called by the writing thread just before its commit: False when the caller gave up."""
        with self._lock:
            if self._abandoned:
                return False
            self._committing = True
            return True

    def abandon(self) -> bool:
        """Called by the caller at its deadline: True when no commit can happen any more."""
        with self._lock:
            if self._committing:
                return False
            self._abandoned = True
            return True


def _retrieved(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()


def evaluation_payload(rec: AnswerRecord, redactor: Redactor | None = None) -> EvaluationPayload:
    """What the evaluation tiers need, copied into the job so a worker never needs the index; its
    question and answer redacted (the retrieved documents' text is the collection's, kept as is)."""
    payload = EvaluationPayload.from_answer(rec.question, rec.answer)
    return redact_payload(payload, redactor or default_redactor())


def redact_payload(payload: EvaluationPayload, redactor: Redactor) -> EvaluationPayload:
    if not redactor.enabled:
        return payload
    return payload.model_copy(
        update={
            "question": redactor.redact(payload.question),
            "standalone_question": redactor.redact(payload.standalone_question),
            "answer": redactor.redact_optional(payload.answer),
            "reference": redactor.redact_optional(payload.reference),
        }
    )


def transient(exc: BaseException) -> bool:
    """Worth another attempt: the database was busy, locked, timed out or lost the connection."""
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError))


def describe(exc: BaseException) -> str:
    """A short reason for logs and responses: the driver's first line, never the SQL or its parameters."""
    inner = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    first = (str(inner).strip().splitlines() or [""])[0][:160]
    return f"{type(inner).__name__}: {first}" if first else type(inner).__name__


class AnswerRecorder:
    def __init__(
        self,
        store: Store,
        metrics: ServiceMetrics,
        *,
        on_queued: Callable[[], None] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        redactor: Redactor | None = None,
    ) -> None:
        self.store = store
        self.redactor = redactor or default_redactor()
        self.metrics = metrics
        self.on_queued = on_queued
        self.timeout_s = timeout_s
        self.delays = RETRY_DELAYS_S

    async def store_answer(self, rec: AnswerRecord) -> None:
        """Commit the answer and its tier-1 job; raises `AnswerNotStoredError` when that cannot be done
        within `timeout_s` (then nothing is stored, except a commit that had already begun)."""
        payload = evaluation_payload(rec, self.redactor)
        if tracing.enabled():  # the evaluation job's span will link back to this request's trace
            payload = payload.model_copy(update={"traceparent": tracing.traceparent()})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        reason = f"no attempt finished within {self.timeout_s:g} s"
        attempt = 0
        while (left := deadline - loop.time()) > 0:
            gate = _Gate()
            write = asyncio.ensure_future(asyncio.to_thread(self._write, rec, payload, gate, left))
            write.add_done_callback(_retrieved)  # an abandoned attempt's error is logged, not left dangling
            try:
                await asyncio.wait_for(asyncio.shield(write), left)
            except TimeoutError:
                if gate.abandon() or not await self._landed(write):
                    reason = f"the database did not take it within {self.timeout_s:g} s"
                    break
            except Exception as exc:
                reason = describe(exc)
                attempt += 1
                log.warning("storing answer %s failed (attempt %d): %s", rec.answer_id, attempt, reason)
                if not transient(exc):
                    break
                delay = self.delays[min(attempt, len(self.delays)) - 1]
                await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
                continue
            if self.on_queued is not None:
                self.on_queued()
            return
        self.metrics.persist_failures.inc()
        log.error("answer %s could not be stored (%s); the client is refused with 503", rec.answer_id, reason)
        raise AnswerNotStoredError(rec.answer_id, reason)

    async def _landed(self, write: asyncio.Future[None]) -> bool:
        """A commit that began before the deadline: did it land within the grace period?"""
        try:
            await asyncio.wait_for(asyncio.shield(write), COMMIT_GRACE_S)  # the thread runs on regardless
            return True
        except Exception as exc:
            log.error("the commit of an answer was under way at the deadline and did not finish: %s", describe(exc))
            return False

    def _write(self, rec: AnswerRecord, payload: EvaluationPayload, gate: _Gate, budget_s: float) -> None:
        ans = rec.answer
        red = self.redactor
        started = time.monotonic()
        with self.store.db.transaction() as session:
            if self.store.db.dialect == "postgresql":  # a blocked statement gives up by itself
                ms = str(max(1, int(budget_s * 1000)))
                session.execute(text("SELECT set_config('statement_timeout', :ms, true)"), {"ms": ms})
            if self.store.queries.get_answer(rec.answer_id) is not None:  # a retry after a lost commit ack
                return
            self.store.queries.record_answer(
                answer_id=rec.answer_id,
                session_id=rec.session_id,
                user_id=rec.user_id,
                question=red.redact(rec.question),
                answer_text=red.redact(ans.answer),
                pipeline_version=ans.pipeline_version,
                citations=rec.citations(),
                confidence=round(ans.quality_score, 4),
                refused=ans.refused,
                termination_reason=ans.termination_reason,
                residual_deficiencies=[red.redact(d) for d in ans.residual_deficiencies],
                trace=red.redact_deep(StoredTrace.of(ans, rec.degraded).stored()),
                latency_ms=rec.latency_ms,
                token_count=estimate_tokens(ans.answer),
                retrieved_chunk_ids=[r.chunk_id for r in payload.retrieved],
                retrieval_scores=list(payload.retrieval_scores),
                experiment_id=rec.experiment_id,
                variant=rec.variant,
            )
            self.store.queue.enqueue(rec.answer_id, Tier.HEURISTIC, payload.stored())
            self.store.model_calls.link(rec.answer_id, run_id=rec.answer_id)  # the graph's calls (answering.py)
            if not gate.begin_commit():
                log.warning(
                    "answer %s: the write got through after %.1f s, past its deadline: rolled back, the client got 503",
                    rec.answer_id,
                    time.monotonic() - started,
                )
                raise _Abandoned(rec.answer_id)
