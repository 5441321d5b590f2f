"""Keys and roles: 401 without or with a bad/revoked key, 403 for a user key on admin routes, 429 with
Retry-After past the per-key limit, keys never in logs."""

from __future__ import annotations

import logging

import pytest

from ragloop.retrieval.collection import Collection
from ragloop.service.auth import RateLimiter, redact
from ragloop.store import Store
from tests.service.conftest import build_app, make_keys, running

pytestmark = pytest.mark.anyio

Q = {"question": "When was the Zorblat Bridge completed?", "session_id": "auth"}


async def test_missing_bad_and_revoked_keys_are_401(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post("/v1/query", json=Q)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "missing API key" in r.json()["detail"]
        for bad in ("nonsense", keys.user[:-3] + "xyz", "rlk_0000000000000000_" + "a" * 43):
            r = await c.post("/v1/query", json=Q, headers={"Authorization": f"Bearer {bad}"})
            assert r.status_code == 401, bad
        assert (await c.post("/v1/query", json=Q, headers=keys.u)).status_code == 200
        # revoked through the admin API: the very next request is refused
        key_id = keys.user.split("_")[1]
        assert (await c.delete(f"/v1/keys/{key_id}", headers=keys.u)).status_code == 403
        assert (await c.delete(f"/v1/keys/{key_id}", headers=keys.a)).status_code == 200
        r = await c.post("/v1/query", json=Q, headers=keys.u)
        assert r.status_code == 401 and "revoked" in r.json()["detail"]
        # revoked directly in the store (as `ragloop keys revoke` does from another process)
        other_id = keys.other.split("_")[1]
        store.api_keys.revoke(other_id)
        assert (await c.get("/v1/conversations", headers=keys.h(keys.other))).status_code == 401


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/pipeline/rollback", {}),
        ("GET", "/v1/pipeline/versions", None),
        ("GET", "/v1/review", None),
        ("POST", "/v1/review/" + "0" * 32, {"scores": {"faithfulness": 1.0}}),
        ("POST", "/v1/keys", {"role": "admin"}),
        ("GET", "/v1/keys", None),
        ("DELETE", "/v1/collections/default/documents/bridge.md", None),
    ],
)
async def test_admin_routes_refuse_user_keys(store: Store, method: str, path: str, body: dict | None) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        assert (await c.request(method, path, json=body)).status_code == 401
        r = await c.request(method, path, json=body, headers=keys.u)
        assert r.status_code == 403 and r.json()["detail"] == "this route needs an admin key"


async def test_admin_can_issue_keys_that_work(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post("/v1/keys", json={"role": "user", "name": "ci", "rate_limit_per_minute": 5}, headers=keys.a)
        assert r.status_code == 201
        issued = r.json()
        assert issued["key"].startswith(f"rlk_{issued['key_id']}_")
        assert (await c.post("/v1/query", json=Q, headers=keys.h(issued["key"]))).status_code == 200
        listed = (await c.get("/v1/keys", headers=keys.a)).json()
        assert issued["key_id"] in {k["key_id"] for k in listed}
        assert all("key" not in k for k in listed)


async def test_rate_limit_429_with_retry_after(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    limited = store.api_keys.create_api_key("user", rate_limit_per_minute=3).key
    async with running(build_app(store)) as c:
        codes = []
        for _ in range(4):
            r = await c.get("/v1/conversations", headers=keys.h(limited))
            codes.append(r.status_code)
        assert codes == [200, 200, 200, 429]
        assert int(r.headers["retry-after"]) >= 1 and r.headers["x-ratelimit-limit"] == "3"
        assert "rate limit of 3 requests per minute" in r.json()["detail"]
        # the limit is per key: another key is unaffected
        assert (await c.get("/v1/conversations", headers=keys.u)).status_code == 200
        metrics = (await c.get("/metrics", headers=keys.a)).text
        assert "ragloop_rate_limited_total 1.0" in metrics


def test_token_bucket_refills() -> None:
    now = [0.0]
    lim = RateLimiter(60, clock=lambda: now[0])
    assert all(lim.hit("k", 2)[0] for _ in range(2))
    ok, retry, _, _ = lim.hit("k", 2)
    assert not ok and retry == pytest.approx(30.0)
    now[0] += 30.0
    assert lim.hit("k", 2)[0]
    assert RateLimiter.retry_after_header(0.2) == "1"


async def test_keys_never_reach_the_logs(
    collection: Collection, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    keys = make_keys(store)
    caplog.set_level(logging.DEBUG)
    async with running(build_app(store)) as c:
        await c.post("/v1/query", json=Q, headers=keys.u)
        await c.post("/v1/query", json=Q, headers={"Authorization": f"Bearer {keys.user}x"})
        await c.get("/v1/conversations", headers=keys.u)
    key_id = keys.user.split("_")[1]
    assert f"key={key_id}" in caplog.text  # the request log names the key by its public id
    secret = keys.user.split("_", 2)[2]
    assert secret not in caplog.text
    # and the redaction filter masks a key that some library might log
    assert secret not in redact(f"Authorization: Bearer {keys.user}; key {keys.user}")
    assert f"rlk_{key_id}_***" in redact(keys.user)


async def test_cors_is_off_by_default(store: Store) -> None:
    async with running(build_app(store)) as c:
        r = await c.options(
            "/v1/query", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in r.headers
