"""Conversation memory follows the service's database: two instances on one PostgreSQL database
(each with its own RAGLOOP_HOME) share every conversation; a SQLite store keeps it in files."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool

from ragloop.config import Settings
from ragloop.retrieval.collection import Collection
from ragloop.service import create_app
from ragloop.service.memory import memory_urls, service_memory
from ragloop.store import Store
from ragloop.text.analysis import content_terms, entities
from tests.agent.conftest import DOCS, HASHED
from tests.service.conftest import CFG, SERVICE, make_keys, open_store, running

pytestmark = pytest.mark.anyio

Q1 = "When was the Zorblat Bridge completed?"
FOLLOW_UP = "Who designed it?"


def instance(home: Path, store: Store) -> Any:
    """One service instance with its own RAGLOOP_HOME (its own copy of the `default` collection)."""
    settings = Settings(home=home)
    docs = home.parent / f"{home.name}-docs"
    for rel, text in DOCS.items():
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(text)
    coll = Collection("default", settings)
    try:
        coll.ingest([docs], HASHED)
    finally:
        coll.close()
    return create_app(settings, store=store, config=CFG, service_config=SERVICE)


def service(c: httpx.AsyncClient) -> Any:
    return c._transport.app.state.service  # type: ignore[attr-defined]


async def trace_of(c: httpx.AsyncClient, answer_id: str, headers: dict[str, str]) -> dict[str, Any]:
    r = await c.get(f"/v1/answers/{answer_id}", headers=headers)
    assert r.status_code == 200, r.text
    trace: dict[str, Any] = r.json()["trace"]
    return trace


@pytest.mark.postgres
async def test_two_instances_on_one_postgres_share_conversations(tmp_path: Path, postgres_url: str) -> None:
    store_a, store_b = open_store(postgres_url), open_store(postgres_url)
    keys = make_keys(store_a)
    try:
        app_a, app_b = instance(tmp_path / "home-a", store_a), instance(tmp_path / "home-b", store_b)
        async with running(app_a) as a, running(app_b) as b:
            for c in (a, b):  # one connection pool per instance, in the store's database
                assert service(c).agents.memory.pooled
            first = await a.post("/v1/query", json={"question": Q1, "session_id": "shared"}, headers=keys.u)
            assert first.status_code == 200 and not first.json()["refused"], first.text
            assert len((await a.get("/v1/conversations/shared", headers=keys.u)).json()["turns"]) == 1

            # instance B sees the turn asked on A, and its follow-up is condensed with A's entity
            conv = (await b.get("/v1/conversations/shared", headers=keys.u)).json()
            assert [t["question"] for t in conv["turns"]] == [Q1]
            r = await b.post("/v1/query", json={"question": FOLLOW_UP, "session_id": "shared"}, headers=keys.u)
            assert r.status_code == 200, r.text
            assert "Marta Quill" in r.json()["answer"]
            condense = (await trace_of(b, r.json()["answer_id"], keys.u))["records"][0]
            assert condense["node"] == "condense" and condense["decision"] == "offline carry-forward"
            carried = {e for e in entities(Q1) if not content_terms(e) <= content_terms(FOLLOW_UP)}
            assert carried and all(e in condense["detail"]["standalone"] for e in carried)

            # both turns, in order, from either instance; the full message log is shared too
            assert len((await b.get("/v1/conversations/shared", headers=keys.u)).json()["turns"]) == 2
            conv = (await a.get("/v1/conversations/shared", headers=keys.u)).json()
            assert [t["question"] for t in conv["turns"]] == [Q1, FOLLOW_UP]
            thread = f"{keys.user.split('_')[1]}:shared"
            assert [m["role"] for m in service(a).agents.memory.log.messages(thread)] == ["user", "assistant"] * 2

            # deleting on B removes it for A: answers, message log and checkpoints
            r = await b.delete("/v1/conversations/shared", headers=keys.u)
            assert r.status_code == 200 and r.json() == {"deleted": True, "answers_deleted": 2}
            assert (await a.get("/v1/conversations/shared", headers=keys.u)).status_code == 404
            assert (await a.delete("/v1/conversations/shared", headers=keys.u)).status_code == 404
            assert service(a).agents.memory.log.messages(thread) == []
            r = await a.post("/v1/query", json={"question": "How tall is it?", "session_id": "shared"}, headers=keys.u)
            assert (await trace_of(a, r.json()["answer_id"], keys.u))["records"][0]["decision"] == "first turn"

            # concurrent turns share the pool (a checkpoint saver per turn), each in its own thread
            asked = await asyncio.gather(
                *(a.post("/v1/query", json={"question": Q1, "session_id": f"p{i}"}, headers=keys.u) for i in range(4))
            )
            assert all(r.status_code == 200 for r in asked)
            for i in range(4):
                await a.get(f"/v1/conversations/p{i}", headers=keys.u)  # A's writes have landed
                r = await b.post("/v1/query", json={"question": FOLLOW_UP, "session_id": f"p{i}"}, headers=keys.u)
                condense = (await trace_of(b, r.json()["answer_id"], keys.u))["records"][0]
                assert condense["decision"] == "offline carry-forward", condense
    finally:
        store_a.close()
        store_b.close()
    # the memory lives in the database, next to the store's tables, and nowhere on either disk
    engine = create_engine(postgres_url, poolclass=NullPool)
    try:
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert {"checkpoints", "checkpoint_writes", "conversation_log", "queries"} <= tables
    for home in ("home-a", "home-b"):
        assert not (tmp_path / home / "checkpoints.sqlite").exists()
        assert not (tmp_path / home / "conversations.sqlite").exists()


@pytest.mark.postgres
async def test_instances_starting_together_create_the_memory_tables_once(postgres_url: str) -> None:
    """Concurrent first start-ups on an empty database (CREATE TABLE IF NOT EXISTS races on PostgreSQL)."""
    memories = [service_memory(postgres_url, Settings()) for _ in range(4)]
    try:
        await asyncio.gather(*(m.aopen(pool_size=2) for m in memories))
        assert all(m.pooled for m in memories)
        async with memories[0].checkpointer() as saver:
            assert await saver.aget_tuple({"configurable": {"thread_id": "none"}}) is None
        memories[1].log.append("t", "user", "hello")
        assert [m["content"] for m in memories[2].log.messages("t")] == ["hello"]
        await memories[3].forget("t")
        assert memories[0].log.messages("t") == []
    finally:
        for m in memories:
            await m.aclose()
            m.close()


def test_memory_urls_follow_the_store(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "h")
    assert memory_urls(f"sqlite:///{tmp_path / 'db' / 'ragloop.db'}", settings) == (
        f"sqlite:///{tmp_path / 'h' / 'checkpoints.sqlite'}",
        f"sqlite:///{tmp_path / 'h' / 'conversations.sqlite'}",
    )
    pg = "postgresql+psycopg://u:s%40cret@db.example:5433/rag?options=-csearch_path%3Dtenant"
    checkpoints, log = memory_urls(pg, settings)
    assert checkpoints == "postgresql://u:s%40cret@db.example:5433/rag?options=-csearch_path%3Dtenant"
    assert log == pg


async def test_a_sqlite_service_keeps_memory_in_its_home(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    home = Settings().home
    async with running(create_app(Settings(), store=store, config=CFG, service_config=SERVICE)) as c:
        assert not service(c).agents.memory.pooled
        r = await c.post("/v1/query", json={"question": Q1, "session_id": "local"}, headers=keys.u)
        assert r.status_code == 200
    assert (home / "checkpoints.sqlite").is_file() and (home / "conversations.sqlite").is_file()
