"""What a caller may see and how refusals behave: probes without a key see status, not inventory;
a user key sees only the default model; every refused key costs the same work (one lookup, one hash
comparison), and refused keys are limited per client address."""

from __future__ import annotations

import statistics
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event

from ragloop.retrieval.collection import Collection
from ragloop.service.auth import FailedAuthLimiter
from ragloop.store import Store
from ragloop.store.repositories import api_keys as api_keys_module
from tests.agent.conftest import DOCS, make_collection
from tests.service.conftest import SERVICE, build_app, make_keys, running

pytestmark = pytest.mark.anyio


async def test_probes_without_a_key_see_status_not_inventory(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        assert (await c.get("/healthz")).json() == {"status": "ok"}
        anonymous = await c.get("/readyz")
        assert anonymous.status_code == 200
        assert anonymous.json() == {"status": "ready", "checks": {"store": "ok", "index": "ok", "models": "ok"}}
        assert (await c.get("/readyz", headers=keys.u)).json() == anonymous.json()  # a user key: the same
        detail = (await c.get("/readyz", headers=keys.a)).json()["checks"]
        assert "default" in detail["index"] and "chunks" in detail["index"] and "pipeline pv-" in detail["models"]
        assert (await c.get("/readyz", headers=keys.h(keys.user + "x"))).status_code == 401  # a bad key is no probe
        assert (await c.get("/metrics")).status_code == 401
        assert (await c.get("/metrics", headers=keys.u)).status_code == 403
        assert "ragloop_review_queue_depth" in (await c.get("/metrics", headers=keys.a)).text


async def test_a_user_key_lists_only_the_default_model(collection: Collection, store: Store, tmp_path: Path) -> None:
    secret = make_collection("payroll", DOCS, tmp_path / "payroll")
    keys = make_keys(store)
    try:
        async with running(build_app(store)) as c:
            user = {m["id"] for m in (await c.get("/v1/models", headers=keys.u)).json()["data"]}
            admin = {m["id"] for m in (await c.get("/v1/models", headers=keys.a)).json()["data"]}
    finally:
        secret.close()
    assert user == {"ragloop", "ragloop:default"}
    assert admin == {"ragloop", "ragloop:default", "ragloop:payroll"}


async def test_an_unknown_collection_names_no_other(collection: Collection, store: Store, tmp_path: Path) -> None:
    secret = make_collection("payroll", DOCS, tmp_path / "payroll")
    keys = make_keys(store)
    try:
        async with running(build_app(store)) as c:
            r = await c.post(
                "/v1/query",
                headers=keys.u,
                json={"question": "Who built the bridge?", "session_id": "s1", "collection": "nope"},
            )
    finally:
        secret.close()
    assert r.status_code == 404
    assert "nope" in r.json()["detail"] and "payroll" not in r.text and "default" not in r.text


class CountingHmac:
    """Stands in for `hmac` in the api_keys module: counts the constant-time comparisons."""

    def __init__(self) -> None:
        self.calls = 0

    def compare_digest(self, a: str, b: str) -> bool:
        import hmac

        self.calls += 1
        return hmac.compare_digest(a, b)


@pytest.fixture
def key_lookups(store: Store) -> Iterator[list[str]]:
    """The SQL statements that read the api_keys table, as they run."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "api_keys" in statement:
            seen.append(statement)

    event.listen(store.db.engine, "before_cursor_execute", record)
    yield seen
    event.remove(store.db.engine, "before_cursor_execute", record)


async def test_every_refused_key_does_the_same_work(
    store: Store, key_lookups: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timing-independent: each refusal path makes exactly one lookup, the same statement, and one
    hash comparison (before the fix a malformed key made no lookup and an unknown id no comparison)."""
    keys = make_keys(store)
    revoked = store.api_keys.create_api_key("user").key
    store.api_keys.revoke(revoked.split("_")[1])
    spy = CountingHmac()
    monkeypatch.setattr(api_keys_module, "hmac", spy)
    cases = {
        "malformed": "nonsense",
        "unknown": "rlk_0123456789abcdef_" + "a" * 43,
        "wrong_secret": keys.user[:-4] + "abcd",
        "revoked": revoked,
        "valid": keys.user,
    }
    app = build_app(store, service_config=SERVICE.with_(auth_failures_per_minute=0))
    async with running(app) as c:
        work = {}
        for name, key in cases.items():
            key_lookups.clear()
            spy.calls = 0
            r = await c.get("/v1/conversations", headers=keys.h(key))
            assert r.status_code == (200 if name == "valid" else 401), name
            work[name] = (spy.calls, list(key_lookups))
    statements = {tuple(lookups) for _, lookups in work.values()}
    assert len(statements) == 1, work  # the very same lookup on every path
    assert all(calls == 1 and len(lookups) == 1 for calls, lookups in work.values()), work


def test_refusal_medians_are_alike(store: Store) -> None:
    """Medians of 200 interleaved verifications per case, store level (no HTTP): a refusal may not be
    half again as slow as another. A loose bound on a noisy shared machine; before the fix a malformed
    key took under half the time of a wrong secret (no lookup at all)."""
    key = store.api_keys.create_api_key("user").key
    cases = {
        "malformed": "nonsense-" + "a" * 40,
        "unknown": "rlk_0123456789abcdef_" + "a" * 43,
        "wrong_secret": key[:-4] + "abcd",
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(220):
        for name, k in cases.items():
            t0 = time.perf_counter()
            assert store.api_keys.verify_api_key(k) is None
            if i >= 20:
                times[name].append(time.perf_counter() - t0)
    medians = {name: statistics.median(xs) for name, xs in times.items()}
    assert max(medians.values()) / min(medians.values()) < 1.5, medians


@asynccontextmanager
async def two_addresses(app: FastAPI) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with app.router.lifespan_context(app):
        clients = [
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(ip, 4000)), base_url="http://t.test")
            for ip in ("10.0.0.1", "10.0.0.2")
        ]
        try:
            yield clients[0], clients[1]
        finally:
            for client in clients:
                await client.aclose()


async def test_refused_keys_are_limited_per_address(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = make_keys(store)
    spy = CountingHmac()
    monkeypatch.setattr(api_keys_module, "hmac", spy)
    app = build_app(store, service_config=SERVICE.with_(auth_failures_per_minute=3))
    bad = {"Authorization": "Bearer rlk_0123456789abcdef_" + "b" * 43}
    async with two_addresses(app) as (a, b):
        assert [(await a.get("/v1/conversations", headers=bad)).status_code for _ in range(3)] == [401] * 3
        r = await a.get("/v1/conversations", headers=bad)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "too many refused API keys" in r.json()["detail"]
        checked = spy.calls
        # from that address even a good key is refused unchecked (it cannot be told from a guess)...
        assert (await a.get("/v1/conversations", headers=keys.u)).status_code == 429
        assert spy.calls == checked
        # ...while no key at all is a plain 401, and the OpenAI routes answer in their own shape
        assert (await a.get("/v1/conversations")).status_code == 401
        r = await a.get("/v1/models", headers=bad)
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
        # another address is unaffected
        assert (await b.get("/v1/conversations", headers=keys.u)).status_code == 200
        assert (await b.get("/v1/conversations", headers=bad)).status_code == 401
        metrics = (await b.get("/metrics", headers=keys.a)).text
    assert "ragloop_auth_failures_total 4.0" in metrics and "ragloop_auth_blocked_total 3.0" in metrics


def test_failure_buckets_refill_and_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    lim = FailedAuthLimiter(6, clock=lambda: now[0])  # one failure back every 10 s
    for _ in range(6):
        assert lim.retry_after("a") is None
        lim.failed("a")
    assert lim.retry_after("a") == pytest.approx(10.0) and lim.retry_after("b") is None
    now[0] += 10.0
    assert lim.retry_after("a") is None
    lim.failed("a")
    assert lim.retry_after("a") == pytest.approx(10.0)
    assert FailedAuthLimiter(0).retry_after("a") is None  # 0: off
    monkeypatch.setattr(FailedAuthLimiter, "MAX_ADDRESSES", 10)
    for i in range(25):
        lim.failed(f"spray-{i}")
    assert len(lim._buckets) <= 10
