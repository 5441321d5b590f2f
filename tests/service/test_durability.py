"""An answer id is only handed out once the answer and its tier-1 job are committed: the ordering on
every path (JSON, both SSE streams), the bounded write (a clear 503, never a silent loss), retries,
a competing writer's lock on SQLite and on PostgreSQL, and no late commit after a 503.

The kill -9 proof against real server processes is in `test_durability_kill.py`."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select

from ragloop.retrieval.collection import Collection
from ragloop.service import recorder as recorder_module
from ragloop.service.answering import Turn
from ragloop.service.auth import Caller
from ragloop.service.openai_compat import ChatCompletionCreate, _stream
from ragloop.service.recorder import AnswerRecord, _Gate
from ragloop.service.state import ServiceState
from ragloop.service.streaming import query_stream
from ragloop.store import Answer, EvaluationJob, Store
from tests.service.conftest import SERVICE, build_app, make_keys, running
from tests.service.test_durability_kill import write_lock

pytestmark = pytest.mark.anyio

QUESTION = "When was the Zorblat Bridge completed?"


def svc_of(client: httpx.AsyncClient) -> ServiceState:
    return client._transport.app.state.service  # type: ignore[attr-defined]


def counts(store: Store) -> tuple[int, int]:
    """(answers rows, heuristic jobs)."""
    with store.db.transaction(write=False) as s:
        answers = s.scalar(select(func.count()).select_from(Answer)) or 0
        jobs = s.scalar(select(func.count()).select_from(EvaluationJob).where(EvaluationJob.tier == "heuristic")) or 0
    return int(answers), int(jobs)


def stored_once(store: Store, answer_id: str) -> bool:
    jobs = [j for j in store.queue.for_answer(answer_id) if j.tier == "heuristic"]
    return store.queries.get_answer(answer_id) is not None and len(jobs) == 1


def failures(svc: ServiceState) -> float:
    return svc.metrics.registry.get_sample_value("ragloop_answer_persist_failures_total") or 0.0


def sse_events(body: str) -> list[tuple[str, Any]]:
    out = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            data = lines["data"]
            out.append((lines.get("event", "message"), data if data == "[DONE]" else json.loads(data)))
    return out


async def test_the_answer_and_its_job_are_committed_before_any_id_is_sent(
    collection: Collection, any_store: Store
) -> None:
    """On every path, the moment a byte carrying the answer id is produced, the answer and exactly one
    tier-1 job are already in the database."""
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "d1"}, headers=keys.u)
        assert r.status_code == 200, r.text
        assert stored_once(store, r.json()["answer_id"])
        r = await c.post(
            "/v1/chat/completions",
            json={"model": "ragloop", "messages": [{"role": "user", "content": QUESTION}]},
            headers=keys.u,
        )
        assert r.status_code == 200, r.text
        assert stored_once(store, r.json()["ragloop"]["answer_id"])

        # the streams, chunk by chunk, straight from their generators: the check runs before the next chunk
        svc = svc_of(c)
        caller = Caller("durability-key", "user", None)
        turn = Turn(question=QUESTION, session_id="d2", collection="default")
        seen: list[str] = []
        chat = ChatCompletionCreate.model_validate(
            {"model": "ragloop", "messages": [{"role": "user", "content": QUESTION}]}
        )
        for path in ("query", "chat"):
            response = await (query_stream(svc, caller, turn) if path == "query" else _stream(chat, svc, caller, turn))
            async for chunk in response.body_iterator:
                raw = chunk if isinstance(chunk, str) else bytes(chunk).decode()
                for answer_id in set(ID_IN_CHUNK.findall(raw)):
                    assert stored_once(store, answer_id), raw[:200]
                    seen.append(answer_id)
        assert len(set(seen)) == 2


ID_IN_CHUNK = re.compile(r'(?:"answer_id": "|chatcmpl-)([0-9a-f]{32})')
"""Where an answer id travels in a chunk: the `answer` event and the chat extra, and the chat chunk's `id`."""


async def test_a_write_that_keeps_failing_is_a_503_on_every_path(
    collection: Collection, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = make_keys(store)
    attempts = 0

    def down(**_kw: Any) -> None:
        nonlocal attempts
        attempts += 1
        raise sa_exc.OperationalError("INSERT ...", {}, sqlite3.OperationalError("disk I/O error"))

    monkeypatch.setattr(store.queries, "record_answer", down)
    app = build_app(store, service_config=SERVICE.with_(answer_write_timeout_s=0.6))
    async with running(app) as c:
        t0 = time.monotonic()
        r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "f1"}, headers=keys.u)
        assert r.status_code == 503 and "could not be stored" in r.json()["detail"], r.text
        assert "disk I/O error" in r.json()["detail"] and "INSERT" not in r.json()["detail"]
        assert r.headers["retry-after"] == "1"
        assert 0.5 < time.monotonic() - t0 < 5 and attempts >= 3  # retried within the budget, then stopped

        r = await c.post("/v1/query?stream=true", json={"question": QUESTION, "session_id": "f2"}, headers=keys.u)
        events = sse_events(r.text)
        assert [e for e, _ in events if e in ("token", "answer")] == []
        assert events[-1][0] == "error" and events[-1][1]["status"] == 503
        assert "could not be stored" in events[-1][1]["detail"]

        chat = {"model": "ragloop", "messages": [{"role": "user", "content": QUESTION}]}
        r = await c.post("/v1/chat/completions", json=chat, headers=keys.u)
        assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
        assert "could not be stored" in r.json()["error"]["message"]

        r = await c.post("/v1/chat/completions", json=chat | {"stream": True}, headers=keys.u)
        events = sse_events(r.text)
        assert events[-1] == ("message", "[DONE]") and "answer_id" not in r.text
        assert "could not be stored" in events[-2][1]["error"]["message"] and events[-2][1]["error"]["code"] == "503"
        assert failures(svc_of(c)) == 4
    assert counts(store) == (0, 0)


async def test_a_permanent_error_fails_at_once_and_a_transient_one_is_retried(
    collection: Collection, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = make_keys(store)
    real = store.queries.record_answer
    script: list[BaseException] = []

    def flaky(**kw: Any) -> Any:
        if script:
            raise script.pop(0)
        return real(**kw)

    monkeypatch.setattr(store.queries, "record_answer", flaky)
    async with running(build_app(store, service_config=SERVICE.with_(answer_write_timeout_s=5.0))) as c:
        locked = sa_exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
        script[:] = [locked, locked]
        r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "t1"}, headers=keys.u)
        assert r.status_code == 200 and stored_once(store, r.json()["answer_id"]) and not script

        script[:] = [sa_exc.DataError("INSERT", {}, ValueError("a string literal cannot contain NUL"))]
        t0 = time.monotonic()
        r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "t2"}, headers=keys.u)
        assert r.status_code == 503 and "NUL" in r.json()["detail"]
        assert time.monotonic() - t0 < 4  # not retried for the whole budget
        assert failures(svc_of(c)) == 1
    assert counts(store) == (1, 1)


async def test_storing_twice_stores_once(collection: Collection, any_store: Store) -> None:
    """A retry after a commit whose acknowledgement was lost (same answer id) adds no row and no job."""
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        recorder = svc_of(c).recorder
        records: list[AnswerRecord] = []
        original = recorder.store_answer

        async def keep(rec: AnswerRecord) -> None:
            records.append(rec)
            await original(rec)

        recorder.store_answer = keep  # type: ignore[method-assign]
        r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "i1"}, headers=keys.u)
        assert r.status_code == 200
        await original(records[0])
        await original(records[0])
    assert counts(store) == (1, 1) and stored_once(store, records[0].answer_id)


async def test_a_competing_writer_delays_the_answer_but_does_not_lose_it(
    collection: Collection, any_store: Store, store_url: str
) -> None:
    """SQLite: another process's `BEGIN IMMEDIATE` for 2.5 s; PostgreSQL: a lock on `queries`. The write
    waits (busy timeout / lock wait) inside the 10 s budget, the event loop keeps serving meanwhile."""
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        await c.post("/v1/query", json={"question": QUESTION, "session_id": "warm"}, headers=keys.u)  # warm caches
        with write_lock(store_url, 2.5) as released:
            t0 = time.monotonic()
            ask = asyncio.create_task(
                c.post("/v1/query", json={"question": QUESTION, "session_id": "w1"}, headers=keys.u)
            )
            await asyncio.sleep(0.8)
            probe = time.monotonic()
            assert (await c.get("/healthz")).status_code == 200
            assert time.monotonic() - probe < 0.5  # the waiting write is in a thread, not on the loop
            assert not ask.done()
            r = await ask
            assert released.is_set() and time.monotonic() - t0 > 1.5
        assert r.status_code == 200, r.text
        assert stored_once(store, r.json()["answer_id"])
    assert counts(store) == (2, 2)


async def test_a_lock_held_past_the_budget_is_a_503_and_nothing_lands_later(
    collection: Collection, any_store: Store, store_url: str
) -> None:
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store, service_config=SERVICE.with_(answer_write_timeout_s=1.0))) as c:
        with write_lock(store_url, 3.0) as released:
            t0 = time.monotonic()
            r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "late"}, headers=keys.u)
            assert r.status_code == 503 and "could not be stored" in r.json()["detail"], r.text
            assert time.monotonic() - t0 < 2.9 and not released.is_set()
            assert failures(svc_of(c)) == 1
        await asyncio.sleep(1.5)  # the abandoned attempt gets the lock now: it must roll back
        assert counts(store) == (0, 0)
        # and the next question is stored as usual
        r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "after"}, headers=keys.u)
        assert r.status_code == 200 and stored_once(store, r.json()["answer_id"])


def test_the_gate_lets_exactly_one_side_win() -> None:
    gate = _Gate()
    assert gate.abandon() and not gate.begin_commit()
    gate = _Gate()
    assert gate.begin_commit() and not gate.abandon()


async def test_a_commit_under_way_at_the_deadline_is_waited_for_briefly(
    collection: Collection, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the budget, an attempt that had already passed its gate (committing) gets `COMMIT_GRACE_S`:
    landed in time, the client gets the answer; later, a 503 (and the answer may exist, unannounced)."""
    monkeypatch.setattr(recorder_module, "COMMIT_GRACE_S", 0.6)
    keys = make_keys(store)
    async with running(build_app(store, service_config=SERVICE.with_(answer_write_timeout_s=0.5))) as c:
        recorder = svc_of(c).recorder
        real = recorder._write
        pause = {"s": 0.8}

        def slow_commit(rec: AnswerRecord, payload: dict[str, Any], gate: _Gate, budget_s: float) -> None:
            assert gate.begin_commit()
            time.sleep(pause["s"])  # the commit takes longer than the budget
            real(rec, payload, _Gate(), budget_s)

        recorder._write = slow_commit  # type: ignore[method-assign]
        r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "g1"}, headers=keys.u)
        assert r.status_code == 200 and stored_once(store, r.json()["answer_id"])
        pause["s"] = 1.5
        r = await c.post("/v1/query", json={"question": QUESTION, "session_id": "g2"}, headers=keys.u)
        assert r.status_code == 503 and "could not be stored" in r.json()["detail"]
        await asyncio.sleep(0.8)  # the slow commit lands: stored, but no client was told its id
        assert counts(store) == (2, 2) and failures(svc_of(c)) == 1
