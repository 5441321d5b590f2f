"""The API in-process (httpx ASGI transport): query, stream, answers, feedback, evaluations,
conversations, pipeline, OpenAI-compatible routes, health and metrics. The core flow runs on SQLite
and on PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from tests.service.conftest import CFG, build_app, make_keys, running, worker_for

pytestmark = pytest.mark.anyio

Q = "When was the Zorblat Bridge completed?"


def sse_events(text: str) -> list[tuple[str, Any]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


async def test_query_store_evaluate_feedback_flow(collection: Collection, any_store: Store) -> None:
    store = any_store
    keys = make_keys(store)
    app = build_app(store)
    async with running(app) as c:
        r = await c.post("/v1/query", json={"question": Q, "session_id": "s-1", "top_k": 3}, headers=keys.u)
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) >= {
            "answer_id",
            "answer",
            "citations",
            "confidence",
            "refused",
            "termination_reason",
            "residual_deficiencies",
            "latency_ms",
            "pipeline_version",
        }
        assert "1887" in body["answer"] and "[1]" in body["answer"]
        assert body["citations"][0]["doc_id"] == "bridge.md"
        assert set(body["citations"][0]) >= {"chunk_id", "doc_id", "title", "heading_path", "excerpt", "score"}
        assert body["citations"][0]["heading_path"] == ["Zorblat Bridge"]
        assert body["pipeline_version"] == CFG.version_id
        answer_id = body["answer_id"]

        # read-your-write: the answer is readable right after the response, with its trace
        r = await c.get(f"/v1/answers/{answer_id}", headers=keys.u)
        assert r.status_code == 200
        got = r.json()
        assert got["question"] == Q and got["answer"] == body["answer"]
        assert [rec["node"] for rec in got["trace"]["records"]][:2] == ["condense", "retrieve"]
        # another user's key cannot see it
        assert (await c.get(f"/v1/answers/{answer_id}", headers=keys.h(keys.other))).status_code == 404

        # the tier-1 job was queued with the answer; a worker evaluates it
        jobs = store.queue.for_answer(answer_id)
        assert [(j.tier, j.status) for j in jobs] == [("heuristic", "queued")]
        await worker_for(store).run(drain=True)
        r = await c.get(f"/v1/evaluations/{answer_id}", headers=keys.u)
        ev = r.json()
        tiers = [e["evaluation_tier"] for e in ev["evaluations"]]
        assert tiers.count("heuristic") == 1
        assert 0.0 <= ev["heuristic_score"] <= 1.0
        assert set(ev["evaluations"][0]["scores"]) >= {
            "citation_coverage",
            "bm25_overlap",
            "retrieval_gap",
            "length_ok",
            "support",
        }

        # negative feedback routes the answer to tier 2 (the judge)
        r = await c.post(
            f"/v1/answers/{answer_id}/feedback",
            json={"rating": "negative", "issues": ["wrong_answer"], "relevant_doc_ids": ["tower.md"]},
            headers=keys.u,
        )
        assert r.status_code == 201, r.text
        assert r.json()["improvement_queued"] is True
        assert r.json()["weight"] > 2.0  # explicit feedback outweighs automatic scores
        assert {j.tier: j.status for j in store.queue.for_answer(answer_id)}["llm_judge"] == "queued"
        await worker_for(store).run(drain=True)
        ev = (await c.get(f"/v1/evaluations/{answer_id}", headers=keys.u)).json()
        assert ev["evaluation_tier"] == "llm_judge"
        assert ev["scores"]["faithfulness"] is not None
        assert "negative_feedback" in ev["failure_evidence"]["reasons"]
        assert [e["evaluation_tier"] for e in ev["evaluations"]].count("llm_judge") == 1

        # positive feedback queues nothing new
        r = await c.post(f"/v1/answers/{answer_id}/feedback", json={"rating": "positive"}, headers=keys.u)
        assert r.json()["improvement_queued"] is False


async def test_stream_sends_nodes_then_the_validated_answer(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post("/v1/query?stream=true", json={"question": Q, "session_id": "st"}, headers=keys.u)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.text)
        kinds = [k for k, _ in events]
        assert kinds[0] == "node" and kinds[-1] == "answer"
        assert "token" in kinds and kinds.index("token") > max(i for i, k in enumerate(kinds) if k == "node")
        final = events[-1][1]
        assert "".join(d["text"] for k, d in events if k == "token") == final["answer"]
        # no text reaches the client before the answer is validated: node events carry decisions only
        assert all(set(d) <= {"node", "decision", "latency_ms"} for k, d in events if k == "node")
        # body field works the same as the query parameter
        r2 = await c.post("/v1/query", json={"question": Q, "session_id": "st2", "stream": True}, headers=keys.u)
        assert sse_events(r2.text)[-1][0] == "answer"
        stored = (await c.get(f"/v1/answers/{final['answer_id']}", headers=keys.u)).json()
        assert stored["answer"] == final["answer"]


async def test_conversations_are_per_key_and_deletable(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        for q in (Q, "Who designed the Quill Tower?"):
            r = await c.post("/v1/query", json={"question": q, "session_id": "conv"}, headers=keys.u)
            assert r.status_code == 200
        await c.post("/v1/query", json={"question": Q, "session_id": "conv"}, headers=keys.h(keys.other))
        listed = (await c.get("/v1/conversations", headers=keys.u)).json()
        assert [(x["session_id"], x["turns"]) for x in listed] == [("conv", 2)]
        conv = (await c.get("/v1/conversations/conv", headers=keys.u)).json()
        assert [t["question"] for t in conv["turns"]] == [Q, "Who designed the Quill Tower?"]
        # the other key's same-named session is a different conversation
        other = (await c.get("/v1/conversations/conv", headers=keys.h(keys.other))).json()
        assert len(other["turns"]) == 1

        agent = await app_agent(c)
        thread = f"{keys_id(keys.user)}:conv"
        assert len(agent.log.messages(thread)) == 4
        r = await c.delete("/v1/conversations/conv", headers=keys.u)
        assert r.status_code == 200 and r.json() == {"deleted": True, "answers_deleted": 2}
        assert agent.log.messages(thread) == []
        assert (await c.get("/v1/conversations/conv", headers=keys.u)).status_code == 404
        assert (await c.delete("/v1/conversations/conv", headers=keys.u)).status_code == 404
        # the other key's conversation is untouched
        assert len((await c.get("/v1/conversations/conv", headers=keys.h(keys.other))).json()["turns"]) == 1
        # deleting removed the checkpoints too: the same session id starts a fresh conversation
        r = await c.post("/v1/query", json={"question": "How tall is it?", "session_id": "conv"}, headers=keys.u)
        assert r.status_code == 200
        trace = (await c.get(f"/v1/answers/{r.json()['answer_id']}", headers=keys.u)).json()["trace"]
        assert trace["records"][0]["decision"] == "first turn"


def keys_id(key: str) -> str:
    return key.split("_")[1]


async def app_agent(c: Any) -> Any:
    transport = c._transport
    svc = transport.app.state.service
    return await svc.agents.any_agent("default")


async def test_pipeline_current_and_admin_rollback(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        cur = (await c.get("/v1/pipeline/current", headers=keys.u)).json()
        assert cur["version"] == CFG.version_id and cur["status"] == "active"
        assert cur["config"]["retrieval"]["dense"]["embedder"] == "test:hashed"
        # a second version, activated; rollback returns to the first and the next answer uses it
        newer = CFG.with_overrides(retrieval={"k": 4})
        store.pipelines.register_config(newer)
        store.pipelines.activate(newer.version_id, reason="test")
        c._transport.app.state.service.agents.invalidate()  # type: ignore[attr-defined]
        r = await c.post("/v1/query", json={"question": Q, "session_id": "p"}, headers=keys.u)
        assert r.json()["pipeline_version"] == newer.version_id
        assert (await c.post("/v1/pipeline/rollback", json={}, headers=keys.u)).status_code == 403
        assert (await c.post("/v1/pipeline/rollback", json={})).status_code == 401
        r = await c.post("/v1/pipeline/rollback", json={"reason": "regression"}, headers=keys.a)
        assert r.status_code == 200, r.text
        assert r.json()["version"] == CFG.version_id
        r = await c.post("/v1/query", json={"question": Q, "session_id": "p"}, headers=keys.u)
        assert r.json()["pipeline_version"] == CFG.version_id
        assert store.audit.timeline(action_type="pipeline_rollback")[0].triggered_by == "regression"
        # nothing before the first version
        r = await c.post("/v1/pipeline/rollback", json={}, headers=keys.a)
        assert r.status_code == 409 and "no previous version" in r.json()["detail"]
        versions = (await c.get("/v1/pipeline/versions", headers=keys.a)).json()
        assert {v["version"] for v in versions} == {CFG.version_id, newer.version_id}


async def test_openai_compatible_routes_in_process(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        models = (await c.get("/v1/models", headers=keys.u)).json()
        assert {"ragloop", "ragloop:default"} <= {m["id"] for m in models["data"]}
        msgs = [{"role": "system", "content": "be nice"}, {"role": "user", "content": "Who built the Zorblat Bridge?"}]
        r = await c.post(
            "/v1/chat/completions", json={"model": "ragloop", "messages": msgs, "temperature": 0.3}, headers=keys.u
        )
        assert r.status_code == 200, r.text
        body = r.json()
        content = body["choices"][0]["message"]["content"]
        assert "Marta Quill" in content and "Sources:\n[1]" in content
        assert body["citations"][0]["doc_id"] == "bridge.md"
        assert body["ragloop"]["answer_id"] and body["usage"]["total_tokens"] > 0
        # stateless follow-up: earlier user turns make the question standalone
        follow = [
            *msgs,
            {"role": "assistant", "content": content},
            {"role": "user", "content": "And when was it completed?"},
        ]
        r = await c.post("/v1/chat/completions", json={"model": "ragloop:default", "messages": follow}, headers=keys.u)
        assert "1887" in r.json()["choices"][0]["message"]["content"]
        # streaming
        r = await c.post(
            "/v1/chat/completions", json={"model": "ragloop", "messages": msgs, "stream": True}, headers=keys.u
        )
        datas = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert datas[-1] == "[DONE]"
        chunks = [json.loads(d) for d in datas[:-1]]
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks) == content
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["citations"]
        # OpenAI-shaped errors
        r = await c.post("/v1/chat/completions", json={"model": "gpt-9", "messages": msgs}, headers=keys.u)
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        r = await c.post("/v1/chat/completions", json={"model": "ragloop", "messages": msgs})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


async def test_health_ready_metrics(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        assert (await c.get("/healthz")).json() == {"status": "ok"}
        ready = await c.get("/readyz")
        assert ready.status_code == 200 and set(ready.json()["checks"]) == {"store", "index", "models"}
        await c.post("/v1/query", json={"question": Q, "session_id": "m"}, headers=keys.u)
        assert (await c.get("/metrics")).status_code == 401  # inventory needs an admin key
        assert (await c.get("/metrics", headers=keys.u)).status_code == 403
        text = (await c.get("/metrics", headers=keys.a)).text
        assert 'ragloop_http_requests_total{method="POST",route="/v1/query",status="200"} 1.0' in text
        assert "ragloop_http_request_duration_seconds_bucket" in text
        assert "ragloop_evaluation_queue_depth" in text and "ragloop_evaluation_lag_seconds" in text
        # the OpenAPI document is the contract: every route is in it
        paths = (await c.get("/openapi.json")).json()["paths"]
        assert {
            "/v1/query",
            "/v1/answers/{answer_id}",
            "/v1/answers/{answer_id}/feedback",
            "/v1/evaluations/{answer_id}",
            "/v1/conversations",
            "/v1/conversations/{session_id}",
            "/v1/collections/{name}/documents",
            "/v1/collections/{name}/documents/{doc_id}",
            "/v1/jobs/{job_id}",
            "/v1/pipeline/current",
            "/v1/pipeline/rollback",
            "/v1/chat/completions",
            "/v1/models",
            "/v1/review",
            "/healthz",
            "/readyz",
            "/metrics",
        } <= set(paths)


async def test_not_ready_without_an_index(store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.get("/readyz")  # a probe without a key learns the reason's class, no names
        assert r.status_code == 503
        assert r.json()["checks"] == {"store": "ok", "index": "missing", "models": "not checked"}
        r = await c.get("/readyz", headers=keys.a)
        assert r.status_code == 503 and "no collection named 'default'" in r.json()["checks"]["index"]
        r = await c.post("/v1/query", json={"question": Q, "session_id": "x"}, headers=keys.u)
        assert r.status_code == 404 and "no collection named 'default'" in r.json()["detail"]
