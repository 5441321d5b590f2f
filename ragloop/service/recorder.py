"""Stores each answer and queues its tier-1 evaluation *after* the response is ready, off the request path.

`AnswerRecorder.record()` returns at once; the write (query + answer rows and the evaluation job, in
one transaction: an answer is never stored without its job) runs in a thread. Until it lands, the
answer is "pending": reads of it (`GET /v1/answers/{id}`, feedback) wait for it, so a client that
asks right after the response still finds it. A failed write is retried with backoff; if the store
stays down the answer is counted in `ragloop_answer_persist_failures_total` and logged; the user
already has their answer. Shutdown drains every pending write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragloop.models.chat import estimate_tokens
from ragloop.service.metrics import ServiceMetrics
from ragloop.store import Store

if TYPE_CHECKING:
    from ragloop.agent.api import Answer

log = logging.getLogger("ragloop.service")

MAX_CONTEXT_CHARS = 2000
MAX_RETRIEVED = 10
RETRY_DELAYS_S = (0.1, 0.5, 2.0, 5.0)


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

    def citations(self) -> list[dict[str, Any]]:
        return [c.model_dump() for c in self.answer.citations]


def evaluation_payload(rec: AnswerRecord) -> dict[str, Any]:
    """What the evaluation tiers need, copied into the job so a worker never needs the index."""
    ans = rec.answer
    state = ans.state or {}
    retrieved = sorted(
        (c for c in state.get("retrieved") or [] if getattr(c, "source", "internal") == "internal"),
        key=lambda c: -float(c.retrieval_score),
    )
    texts: dict[str, list[str]] = {}
    order: list[str] = []
    for s in state.get("kept") or []:
        if s.chunk_id not in texts:
            texts[s.chunk_id] = []
            order.append(s.chunk_id)
        texts[s.chunk_id].append(s.text)
    sources = [{"chunk_id": cid, "text": " ".join(texts[cid])[:MAX_CONTEXT_CHARS]} for cid in order]
    return {
        "question": rec.question,
        "standalone_question": ans.standalone_question,
        "answer": ans.answer,
        "refused": ans.refused,
        "termination_reason": ans.termination_reason,
        "citations": [{"n": c.n, "chunk_id": c.chunk_id, "doc_id": c.doc_id} for c in ans.citations],
        "sources": sources,
        "retrieved": [
            {
                "chunk_id": c.chunk_id,
                "doc_id": c.doc_id,
                "score": round(float(c.retrieval_score), 6),
                "text": c.text[:MAX_CONTEXT_CHARS],
            }
            for c in retrieved[:MAX_RETRIEVED]
        ],
        "retrieval_scores": [round(float(c.retrieval_score), 6) for c in retrieved[:MAX_RETRIEVED]],
        "pipeline_version": ans.pipeline_version,
    }


class AnswerRecorder:
    def __init__(self, store: Store, metrics: ServiceMetrics, *, on_queued: Callable[[], None] | None = None) -> None:
        self.store = store
        self.metrics = metrics
        self.on_queued = on_queued
        self._pending: dict[str, asyncio.Task[bool]] = {}
        self._by_session: dict[str, set[str]] = {}
        self.delays = RETRY_DELAYS_S

    def record(self, rec: AnswerRecord) -> None:
        """Schedule the write; returns immediately."""
        task = asyncio.get_running_loop().create_task(self._persist(rec), name=f"persist-{rec.answer_id}")
        self._pending[rec.answer_id] = task
        self._by_session.setdefault(rec.session_id, set()).add(rec.answer_id)
        task.add_done_callback(lambda _t: self._forget(rec))

    def _forget(self, rec: AnswerRecord) -> None:
        self._pending.pop(rec.answer_id, None)
        ids = self._by_session.get(rec.session_id)
        if ids is not None:
            ids.discard(rec.answer_id)
            if not ids:
                self._by_session.pop(rec.session_id, None)

    async def _persist(self, rec: AnswerRecord) -> bool:
        payload = evaluation_payload(rec)
        for attempt, delay in enumerate((0.0, *self.delays)):
            if delay:
                await asyncio.sleep(delay)
            try:
                await asyncio.to_thread(self._write, rec, payload)
            except Exception as exc:
                log.warning(
                    "storing answer %s failed (attempt %d): %s: %s",
                    rec.answer_id,
                    attempt + 1,
                    type(exc).__name__,
                    str(exc)[:200],
                )
                continue
            if self.on_queued is not None:
                self.on_queued()
            return True
        self.metrics.persist_failures.inc()
        log.error("answer %s was served but could not be stored; it will not be evaluated", rec.answer_id)
        return False

    def _write(self, rec: AnswerRecord, payload: dict[str, Any]) -> None:
        ans = rec.answer
        with self.store.db.transaction():
            if self.store.queries.get_answer(rec.answer_id) is not None:  # a retry after a lost commit ack
                return
            self.store.queries.record_answer(
                answer_id=rec.answer_id,
                session_id=rec.session_id,
                user_id=rec.user_id,
                question=rec.question,
                answer_text=ans.answer,
                pipeline_version=ans.pipeline_version,
                citations=rec.citations(),
                confidence=round(ans.quality_score, 4),
                refused=ans.refused,
                termination_reason=ans.termination_reason,
                residual_deficiencies=list(ans.residual_deficiencies),
                trace={"records": ans.trace.to_json(), "summary": ans.trace.summary(), "degraded": rec.degraded},
                latency_ms=rec.latency_ms,
                token_count=estimate_tokens(ans.answer),
                retrieved_chunk_ids=[r["chunk_id"] for r in payload["retrieved"]],
                retrieval_scores=payload["retrieval_scores"],
            )
            self.store.queue.enqueue(rec.answer_id, "heuristic", payload)

    def is_pending(self, answer_id: str) -> bool:
        return answer_id in self._pending

    async def wait(self, answer_id: str, timeout: float = 30.0) -> None:
        task = self._pending.get(answer_id)
        if task is not None:
            await asyncio.wait_for(asyncio.shield(task), timeout)

    async def wait_session(self, session_id: str, timeout: float = 30.0) -> None:
        for answer_id in list(self._by_session.get(session_id, ())):
            await self.wait(answer_id, timeout)

    async def drain(self, timeout: float = 30.0) -> None:
        tasks = list(self._pending.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    @property
    def pending(self) -> int:
        return len(self._pending)
