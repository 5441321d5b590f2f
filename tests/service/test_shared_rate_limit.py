"""Per-key rate limits shared across servers through a real Redis: two apps on one store and one Redis
give a key its limit once, not once per server; concurrent hits never take one token twice; a
Redis outage falls back to each server's own bucket."""

from __future__ import annotations

import threading

import pytest
import redis

from ragloop.retrieval.collection import Collection
from ragloop.service.auth import RateLimiter
from ragloop.service.rate_limit import RedisRateLimiter, make_rate_limiter
from ragloop.store import Store
from tests.service.conftest import SERVICE, build_app, make_keys, running
from tests.store.conftest import redis_test_url


def _limiter(url: str) -> RedisRateLimiter:
    limiter = make_rate_limiter(url, 120)
    assert isinstance(limiter, RedisRateLimiter)
    return limiter


@pytest.mark.anyio
async def test_two_servers_share_one_limit(collection: Collection, store: Store) -> None:
    url = redis_test_url()
    keys = make_keys(store)
    limited = store.api_keys.create_api_key("user", rate_limit_per_minute=3).key
    shared = SERVICE.with_(redis_url=url)
    async with (
        running(build_app(store, service_config=shared)) as a,
        running(build_app(store, service_config=shared)) as b,
    ):
        codes = [(await c.get("/v1/conversations", headers=keys.h(limited))).status_code for c in (a, b, a, b)]
        assert codes == [200, 200, 200, 429]  # in-process buckets would have allowed 3 on each
        r = await a.get("/v1/conversations", headers=keys.h(limited))
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 20
        assert r.headers["x-ratelimit-limit"] == "3"
        assert (await b.get("/v1/conversations", headers=keys.u)).status_code == 200  # per key


def test_concurrent_hits_take_each_token_once() -> None:
    url = redis_test_url()
    servers = [_limiter(url) for _ in range(2)]
    key = f"test-{threading.get_ident()}-{id(servers)}"
    allowed: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(16)

    def hit(i: int) -> None:
        start.wait()
        for _ in range(5):
            ok = servers[i % 2].hit(key, 20)[0]
            with lock:
                allowed.append(ok)

    threads = [threading.Thread(target=hit, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert len(allowed) == 80
        # 20 tokens, plus what refilled (20 a minute) while the 80 hits ran: a second at most
        assert 20 <= sum(allowed) <= 21
        ok, retry, limit, remaining = servers[0].hit(key, 20)
        if not ok:
            assert 0 < retry <= 3.0 and (limit, remaining) == (20, 0)
        assert 0 < servers[0].client.ttl(f"ragloop:ratelimit:{key}") <= 61
        assert all(s.errors == 0 for s in servers)
    finally:
        servers[0].client.delete(f"ragloop:ratelimit:{key}")
        for s in servers:
            s.close()


def test_redis_down_falls_back_to_the_servers_own_bucket(caplog: pytest.LogCaptureFixture) -> None:
    down = RedisRateLimiter(redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2), 120)
    try:
        assert [down.hit("k", 2)[0] for _ in range(3)] == [True, True, False]
        assert down.errors == 3
        assert sum("limiting in process" in r.message for r in caplog.records) == 1  # logged once, not per request
    finally:
        down.close()
    assert type(make_rate_limiter(None, 120)) is RateLimiter
