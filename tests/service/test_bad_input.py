"""Bad input gets a 4xx with a clear message, and nothing is half-written."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from ragloop.retrieval.collection import Collection
from ragloop.store import Answer, EvaluationJob, Store, UserFeedback
from tests.service.conftest import build_app, make_keys, running

pytestmark = pytest.mark.anyio


def counts(store: Store) -> tuple[int, int, int]:
    with store.db.transaction(write=False) as s:
        return (
            s.scalar(select(func.count()).select_from(Answer)) or 0,
            s.scalar(select(func.count()).select_from(EvaluationJob)) or 0,
            s.scalar(select(func.count()).select_from(UserFeedback)) or 0,
        )


async def test_malformed_requests_are_4xx_with_a_message(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    h = {**keys.u, "Content-Type": "application/json"}
    async with running(build_app(store)) as c:
        r = await c.post("/v1/query", content=b'{"question": "x", ', headers=h)
        assert r.status_code == 400 and r.json()["detail"].startswith("the request body is not valid JSON")
        r = await c.post("/v1/query", content=b"[1, 2]", headers=h)
        assert r.status_code == 422
        cases = [
            ({"question": 42, "session_id": "s"}, "question: Input should be a valid string"),
            ({"question": "   ", "session_id": "s"}, "question: String should have at least 1 character"),
            ({"question": "q"}, "session_id: Field required"),
            ({"question": "q", "session_id": "has space"}, "session_id: String should match pattern"),
            ({"question": "q", "session_id": "s", "top_k": 0}, "top_k: Input should be greater than or equal to 1"),
            ({"question": "q", "session_id": "s", "top_k": "many"}, "top_k: Input should be a valid integer"),
            ({"question": "q" * 4001, "session_id": "s"}, "question: String should have at most 4000 characters"),
            ({"question": "q", "session_id": "s", "bogus": 1}, "bogus: Extra inputs are not permitted"),
            ({"question": "?; [", "session_id": "s"}, "question: Value error, the question has no words"),
        ]
        for body, message in cases:
            r = await c.post("/v1/query", json=body, headers=keys.u)
            assert r.status_code == 422, body
            assert message in r.json()["detail"], (body, r.json())
        # unpaired surrogate escapes are not text: refused before they reach the graph or the store
        bad = b'{"question": "caf\\udc80 au lait?", "session_id": "s"}'
        r = await c.post("/v1/query", content=bad, headers=h)
        assert r.status_code == 422 and "question: Value error, text contains invalid Unicode" in r.json()["detail"]
        chat = b'{"model": "ragloop", "messages": [{"role": "user", "content": "hi \\ud800"}]}'
        r = await c.post("/v1/chat/completions", content=chat, headers=h)
        assert r.status_code == 422 and "unpaired surrogate" in r.json()["error"]["message"]
        r = await c.get("/v1/conversations?offset=45021096913734339657728", headers=keys.u)
        assert r.status_code == 422
        # 10 MB body: refused by size before it is read (declared) or while streaming (chunked)
        big = b'{"question": "' + b"a" * (10 * 1024 * 1024) + b'", "session_id": "s"}'
        r = await c.post("/v1/query", content=big, headers=h)
        assert r.status_code == 413 and "larger than the 1,048,576 byte limit" in r.json()["detail"]

        async def chunks():  # no Content-Length: counted as it streams in
            for _ in range(20):
                yield b"a" * (512 * 1024)

        r = await c.post("/v1/query", content=chunks(), headers=h)
        assert r.status_code == 413
        # unknown ids
        unknown = "0" * 32
        assert (await c.get(f"/v1/answers/{unknown}", headers=keys.u)).status_code == 404
        assert (await c.get("/v1/answers/not-an-id", headers=keys.u)).status_code == 422
        r = await c.post(f"/v1/answers/{unknown}/feedback", json={"rating": "negative"}, headers=keys.u)
        assert r.status_code == 404 and unknown in r.json()["detail"]
        assert (await c.get(f"/v1/evaluations/{unknown}", headers=keys.u)).status_code == 404
        assert (await c.get("/v1/jobs/nope", headers=keys.a)).status_code == 404
        r = await c.post("/v1/pipeline/rollback", json={"target_version": "pv-000000000000"}, headers=keys.a)
        assert r.status_code == 404
        r = await c.post("/v1/query", json={"question": "q", "session_id": "s", "collection": "nope"}, headers=keys.u)
        assert r.status_code == 404 and "no collection named 'nope'" in r.json()["detail"]
        assert (await c.get("/v1/no-such-route", headers=keys.u)).status_code == 404
    assert counts(store) == (0, 0, 0)


async def test_bad_feedback_writes_nothing(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post(
            "/v1/query", json={"question": "When was the Zorblat Bridge completed?", "session_id": "f"}, headers=keys.u
        )
        answer_id = r.json()["answer_id"]
        await c.get(f"/v1/answers/{answer_id}", headers=keys.u)  # wait for it to be stored
        before = counts(store)
        for body in (
            {"rating": "meh"},
            {"rating": "negative", "issues": ["bad_vibes"]},
            {"rating": "negative", "relevant_doc_ids": [""]},
            {"rating": "negative", "corrected_answer": "x" * 10_001},
        ):
            r = await c.post(f"/v1/answers/{answer_id}/feedback", json=body, headers=keys.u)
            assert r.status_code == 422, body
        assert counts(store) == before
        r = await c.post("/v1/review/" + answer_id, json={"scores": {"faithfulness": 1.5}}, headers=keys.a)
        assert r.status_code == 422 and "less than or equal to 1" in r.json()["detail"]
        assert store.evaluations.for_answer(answer_id) == []
