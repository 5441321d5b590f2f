"""One question through the answer graph, for `/v1/query` and `/v1/chat/completions` alike.

`answer_events()` yields the graph's node events and then the final, validated answer; when the
active pipeline fails it answers with the last known-good one (marked `degraded`). Once the
answer exists the `AnswerRecorder` commits it with its tier-1 job, and only then is the answer
event (the first thing that carries the `answer_id`) yielded: an id a client holds is always
stored. When the store does not take it within `answer_write_timeout_s` the caller gets a 503
instead (an `error` event on streams): the answer is refused, not silently lost.

Conversations are per key: the graph's thread (checkpoints and message log) and the stored
session are `<key_id>:<session_id>`, so two keys that pick the same session id never share memory
or read each other's turns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import HTTPException

from ragloop.agent.answer import AnswerEvent, NodeEvent
from ragloop.models.chat import CallPurpose, call_scope
from ragloop.retrieval.collection import CollectionError
from ragloop.service.auth import Caller
from ragloop.service.pipelines import NoSuchCollectionError, NotIndexedError, Served
from ragloop.service.recorder import AnswerNotStoredError, AnswerRecord
from ragloop.service.schemas import CitationPublic, QueryPublic
from ragloop.service.state import ServiceState
from ragloop.store import new_id
from ragloop.tracing import annotate_current

if TYPE_CHECKING:
    from ragloop.agent.api import Answer

log = logging.getLogger("ragloop.service")


def stored_session(caller: Caller, session_id: str) -> str:
    return f"{caller.key_id}:{session_id}"


def public_session(caller: Caller, stored: str) -> str:
    prefix = f"{caller.key_id}:"
    return stored[len(prefix) :] if stored.startswith(prefix) else stored


@dataclass
class Turn:
    question: str
    session_id: str
    """The client's session id (not namespaced)."""
    collection: str
    top_k: int | None = None
    remember: bool = True
    """False for stateless OpenAI-style calls: no checkpoint thread, history arrives in the request."""


def to_public(rec: AnswerRecord, session_id: str) -> QueryPublic:
    ans = rec.answer
    return QueryPublic(
        answer_id=rec.answer_id,
        session_id=session_id,
        answer=ans.answer,
        citations=[CitationPublic.model_validate(c.model_dump()) for c in ans.citations],
        confidence=round(float(ans.quality_score), 4),
        refused=ans.refused,
        termination_reason=ans.termination_reason,
        residual_deficiencies=list(ans.residual_deficiencies),
        latency_ms=rec.latency_ms,
        pipeline_version=ans.pipeline_version,
        degraded=rec.degraded,
    )


async def _served(svc: ServiceState, turn: Turn, version_id: str | None = None) -> Served:
    try:
        return await svc.agents.serve(turn.collection, turn.top_k, version_id)
    except NoSuchCollectionError as exc:
        raise HTTPException(404, str(exc)) from None
    except NotIndexedError as exc:
        raise HTTPException(503, str(exc)) from None
    except CollectionError as exc:
        raise HTTPException(503, str(exc)) from None
    except Exception as exc:
        log.exception("no pipeline can answer")
        raise HTTPException(503, f"the answer pipeline is unavailable ({type(exc).__name__})") from None


@dataclass(frozen=True)
class Answered:
    """The answer event: what was stored and what the client is shown."""

    record: AnswerRecord
    public: QueryPublic


ServiceEvent = NodeEvent | Answered


async def answer_events(svc: ServiceState, caller: Caller, turn: Turn) -> AsyncIterator[ServiceEvent]:
    """A `NodeEvent` per graph step, then one `Answered`, yielded only after the answer and its tier-1
    job are committed. Raises HTTPException before the first event when nothing can answer, and 503
    in place of the answer event when it cannot be stored."""
    t0 = time.perf_counter()
    route = svc.experiments.route(stored_session(caller, turn.session_id)) if svc.experiments else None
    served = await _served(svc, turn, route.version_id if route else None)
    thread = stored_session(caller, turn.session_id) if turn.remember else None
    answer_id = new_id()
    final: Answer | None = None
    attempts = [served]
    while attempts:
        current = attempts.pop(0)
        try:
            # the graph's model calls are logged under the answer's id as run id (the answer row does not
            # exist yet) and linked to the answer in the transaction that stores it (`AnswerRecorder`)
            async with svc.slots():
                with call_scope(run_id=answer_id, purpose=CallPurpose.ANSWER):
                    async for ev in current.agent.astream(turn.question, thread):
                        if isinstance(ev, AnswerEvent):
                            final = ev.answer
                        else:
                            yield ev
            served = current
            break
        except Exception as exc:
            fallback = svc.agents.fallback(turn.collection, exclude=current.key) if not current.degraded else None
            log.error(
                "pipeline %s failed on a question (%s: %s)%s",
                current.version_id,
                type(exc).__name__,
                str(exc)[:200],
                f"; retrying with the last good pipeline {fallback.version_id}" if fallback else "",
                exc_info=exc,
            )
            if fallback is None:
                raise HTTPException(503, f"the answer pipeline failed ({type(exc).__name__})") from None
            attempts.append(fallback)
    assert final is not None
    svc.agents.mark_good(served)
    final = final.with_version(served.version_id)
    latency_ms = round((time.perf_counter() - t0) * 1000)
    rec = AnswerRecord(
        answer_id=answer_id,
        session_id=stored_session(caller, turn.session_id),
        user_id=caller.key_id,
        question=turn.question,
        answer=final,
        latency_ms=latency_ms,
        degraded=served.degraded,
        # an arm's answer counts for the arm only when the arm's version served it
        experiment_id=route.experiment_id if route and served.version_id == route.version_id else None,
        variant=route.variant if route and served.version_id == route.version_id else None,
    )
    try:
        await svc.recorder.store_answer(rec)
    except AnswerNotStoredError as exc:
        raise HTTPException(
            503,
            f"the answer could not be stored ({exc.reason}), so it was not delivered; retry the question",
            headers={"Retry-After": "1"},
        ) from None
    annotate_current(  # the request's span: which answer it delivered (ids and flags, never text)
        {
            "ragloop.answer_id": answer_id,
            "ragloop.collection": turn.collection,
            "ragloop.pipeline_version": served.version_id,
            "ragloop.degraded": served.degraded,
            "ragloop.refused": final.refused,
            "ragloop.experiment_id": rec.experiment_id or "",
            "ragloop.variant": rec.variant or "",
        }
    )
    svc.metrics.answers.labels(str(final.refused).lower(), str(served.degraded).lower()).inc()
    svc.metrics.answer_latency.observe(latency_ms / 1000)
    yield Answered(rec, to_public(rec, turn.session_id))


async def answer_once(svc: ServiceState, caller: Caller, turn: Turn) -> tuple[AnswerRecord, QueryPublic]:
    async for ev in answer_events(svc, caller, turn):
        if isinstance(ev, Answered):
            return ev.record, ev.public
    raise HTTPException(500, "the answer graph ended without an answer")
