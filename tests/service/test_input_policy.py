"""The input policy of `ragloop.service.inputs`, case by case: what is refused (with the field or
parameter named), what is taken as sent, strict types, one question rule for `/v1/query` and chat
completions, and bidi controls from documents kept off what a client is shown. The sweep over every
route and both engines is `test_hostile_input.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from tests.agent.conftest import DOCS, make_collection
from tests.service.conftest import build_app, make_keys, running

pytestmark = pytest.mark.anyio

Q = "When was the Zorblat Bridge completed?"


async def test_refused_text_is_a_422_naming_the_field_or_parameter(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post("/v1/query", json={"question": Q, "session_id": "p"}, headers=keys.u)
        answer_id = r.json()["answer_id"]
        cases = [
            (
                "/v1/query",
                {"question": "When\x00?", "session_id": "p"},
                "question: Value error, text contains a control character (U+0000 at position 4); only tab, "
                "line feed and carriage return are allowed",
            ),
            (
                "/v1/query",
                {"question": "\x1fZorblat", "session_id": "p"},
                "question: Value error, text contains a control character (U+001F at position 0)",
            ),  # checked before whitespace is stripped
            (
                "/v1/query",
                {"question": "Zorblat \u202eegdirB", "session_id": "p"},
                "question: Value error, text contains an invisible bidirectional control character (U+202E",
            ),
            (
                f"/v1/answers/{answer_id}/feedback",
                {"rating": "negative", "corrected_answer": "1887\x00"},
                "corrected_answer: Value error, text contains a control character (U+0000 at position 4)",
            ),
            (
                f"/v1/answers/{answer_id}/feedback",
                {"rating": "negative", "highlighted_passages": [{"text": "span", "note": "a\x85"}]},
                "highlighted_passages.0.note: Value error",
            ),
            (
                f"/v1/answers/{answer_id}/feedback",
                {"rating": "negative", "relevant_doc_ids": ["a.md", "b\x07"]},
                "relevant_doc_ids: Value error, item 1: text contains a control character (U+0007 at position 1)",
            ),
            ("/v1/keys", {"name": "ops\x00"}, "name: Value error, text contains a control character"),
            # free-form bodies (config overrides) are held to the policy all the way down, keys included
            (
                "/v1/pipeline/candidates",
                {"overrides": {"agent": {"prompt_version": "v\u202e1"}}},
                "overrides: Value error, 'agent' 'prompt_version': text contains an invisible bidirectional",
            ),
            (
                "/v1/pipeline/candidates",
                {"overrides": {"agent\x00": {}}},
                "overrides: Value error, key 'agent\\x00': text contains a control character",
            ),
        ]
        for url, body, message in cases:
            r = await c.post(url, json=body, headers=keys.a)
            assert r.status_code == 422, (url, body, r.text)
            assert message in r.json()["detail"], (body, r.json()["detail"])
        # path and query values, declared or not, before any lookup (and before the key check)
        for url, message in [
            ("/v1/jobs/%00", "path.job_id: Value error, text contains a control character (U+0000 at position 0)"),
            ("/v1/jobs?collection=a%00b", "query.collection: Value error"),
            (
                "/v1/collections/default/documents/%E2%80%AEfdp.md",
                "path.doc_id: Value error, text contains an invisible bidirectional",
            ),
            ("/v1/conversations?x=%01", "query.x: Value error"),
        ]:
            method = "DELETE" if "/documents/" in url else "GET"
            for headers in (keys.a, {}):
                r = await c.request(method, url, headers=headers)
                assert r.status_code == 422 and message in r.json()["detail"], (url, r.text)
        # on the OpenAI routes, in OpenAI's error shape
        r = await c.get("/v1/models?q=%00", headers=keys.u)
        assert r.status_code == 422
        assert r.json()["error"]["type"] == "invalid_request_error" and "query.q" in r.json()["error"]["message"]
        r = await c.post(
            "/v1/chat/completions",
            json={"model": "ragloop", "messages": [{"role": "user", "content": "Zorblat\x00 Bridge?"}]},
            headers=keys.u,
        )
        assert r.status_code == 422 and "messages.0.content" in r.json()["error"]["message"]


async def test_other_text_is_taken_as_sent(collection: Collection, store: Store) -> None:
    """SQL-looking text, decomposed accents, zero-width and astral characters, tabs and newlines are
    data: stored and returned exactly (nothing is normalised)."""
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        for question in (
            "Zorblat Bridge'; DROP TABLE answers; --",
            "Cafe\u0301 near the Zorblat\u200b Bridge \U0001f309?",
            "When was the\tZorblat\r\nBridge completed?",
        ):
            r = await c.post("/v1/query", json={"question": question, "session_id": "as-sent"}, headers=keys.u)
            assert r.status_code == 200, r.text
            got = await c.get(f"/v1/answers/{r.json()['answer_id']}", headers=keys.u)
            assert got.json()["question"] == question


async def test_types_are_strict(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        for body, message in [
            ({"question": Q, "session_id": "t", "top_k": True}, "top_k: Input should be a valid integer"),
            ({"question": Q, "session_id": "t", "top_k": "5"}, "top_k: Input should be a valid integer"),
            ({"question": Q, "session_id": "t", "top_k": 5.0}, "top_k: Input should be a valid integer"),
            ({"question": Q, "session_id": "t", "stream": "true"}, "stream: Input should be a valid boolean"),
            ({"question": Q, "session_id": "t", "stream": 1}, "stream: Input should be a valid boolean"),
        ]:
            r = await c.post("/v1/query", json=body, headers=keys.u)
            assert r.status_code == 422 and message in r.json()["detail"], (body, r.text)
        r = await c.post("/v1/keys", json={"rate_limit_per_minute": "60"}, headers=keys.a)
        assert r.status_code == 422
        chat = {"model": "ragloop", "messages": [{"role": "user", "content": Q}], "stream": "yes"}
        assert (await c.post("/v1/chat/completions", json=chat, headers=keys.u)).status_code == 422
        # still JSON-friendly: an integer score is a float, a literal is its string
        r = await c.post("/v1/query", json={"question": Q, "session_id": "t", "top_k": 3}, headers=keys.u)
        answer_id = r.json()["answer_id"]
        r = await c.post(f"/v1/review/{answer_id}", json={"scores": {"faithfulness": 1}}, headers=keys.a)
        assert r.status_code == 201 and r.json()["scores"]["faithfulness"] == 1.0
        # the query-string flag is a string by nature: still parsed
        r = await c.post("/v1/query?stream=true", json={"question": Q, "session_id": "t"}, headers=keys.u)
        assert r.headers["content-type"].startswith("text/event-stream")


async def test_chat_completions_follow_the_query_rules(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:

        async def chat(**body: object) -> tuple[int, str]:
            body = {"model": "ragloop", "messages": [{"role": "user", "content": Q}], **body}
            r = await c.post("/v1/chat/completions", json=body, headers=keys.u)
            return r.status_code, r.json()["error"]["message"] if r.status_code >= 400 else ""

        assert await chat(messages=[{"role": "user", "content": "?; ["}]) == (
            422,
            "messages: Value error, the question has no words",
        )
        assert (await chat(messages=[{"role": "system", "content": "be brief"}]))[0] == 422
        status, message = await chat(model="ragloop:../../etc")
        assert status == 422 and "does not name a collection" in message
        assert (await chat(model="gpt-9"))[0] == 404  # a well-formed other model: OpenAI's model_not_found
        assert (await chat(model="ragloop:nope"))[0] == 404
        status, message = await chat(user="a\x00/../b")
        assert status == 422 and message.startswith("user: Value error")
        status, message = await chat(user="has space")
        assert status == 422 and "user: String should match pattern" in message
        # a session-shaped `user` is the session: listed, readable and deletable like a /v1/query one
        assert await chat(user="chat-user-1") == (200, "")
        assert (await c.get("/v1/conversations/chat-user-1", headers=keys.u)).status_code == 200
        listed = [s["session_id"] for s in (await c.get("/v1/conversations", headers=keys.u)).json()]
        assert "chat-user-1" in listed
        assert (await c.delete("/v1/conversations/chat-user-1", headers=keys.u)).status_code == 200


async def test_bidi_controls_from_documents_are_not_shown(tmp_path: Path, store: Store) -> None:
    """A document can carry U+202E (it is not client input); what a client is shown from it (answer
    text, citation titles and excerpts) has it removed, so the answer cannot display as something
    it does not say. The stored answer keeps the pipeline's exact output."""
    spoof = "# Zorblat \u202eToll\u202c\n\nThe Zorblat Bridge toll is \u202e05\u202c crowns for each carriage."
    coll = make_collection("default", {**DOCS, "toll.md": spoof}, tmp_path / "docs")
    try:
        keys = make_keys(store)
        async with running(build_app(store)) as c:
            question = "What is the toll on the Zorblat Bridge for each carriage?"
            r = await c.post("/v1/query", json={"question": question, "session_id": "b"}, headers=keys.u)
            body = r.json()
            assert any(cit["doc_id"] == "toll.md" for cit in body["citations"]), body
            shown = [body["answer"]] + [f"{cit['title']} {cit['excerpt']}" for cit in body["citations"]]
            got = (await c.get(f"/v1/answers/{body['answer_id']}", headers=keys.u)).json()
            shown += [got["answer"]] + [cit["excerpt"] for cit in got["citations"]]
            turns = (await c.get("/v1/conversations/b", headers=keys.u)).json()["turns"]
            shown += [t["answer"] for t in turns]
            assert "crowns" in " ".join(shown)
            assert not any("\u202e" in s or "\u202c" in s for s in shown)
            stored = store.queries.get_answer(body["answer_id"])
            assert stored is not None and "\u202e" in stored.answer_text + str(stored.citations)
    finally:
        coll.close()
