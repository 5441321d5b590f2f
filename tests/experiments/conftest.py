"""Fixtures for the experiments tests: the real Redis on 127.0.0.1:6379 (or RAGLOOP_TEST_REDIS_URL).

When Redis is unreachable the Redis tests are skipped with the reason, except under `CI=true`,
where they fail: CI must exercise the cache path (the twin of tests/store's `require_postgres`).
Every test gets its own key prefix and its keys are deleted afterwards, so tests never see each
other's assignments nor anything else on the server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.store.conftest import backend, clock, db, postgres_admin_url, store, store_url  # noqa: F401 (fixtures)

REDIS_URL_ENV = "RAGLOOP_TEST_REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_redis(url: str, *, ci: bool) -> str:
    """`url` if a Redis server answers PING there; otherwise skip, or fail when `ci` (CI=true)."""
    import redis

    problem = None
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        if not client.ping():
            problem = "PING did not answer PONG"
    except Exception as exc:
        problem = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    finally:
        client.close()
    if problem is None:
        return url
    reason = f"Redis at {url} is unreachable ({problem})"
    if ci:
        pytest.fail(f"{reason}; CI=true requires the Redis-cached assignment tests", pytrace=False)
    pytest.skip(f"{reason}; start redis-server or set {REDIS_URL_ENV}")


@pytest.fixture(scope="session")
def redis_url() -> str:
    return require_redis(os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL), ci=_ci())


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def redis_prefix(redis_client: Any) -> Iterator[str]:
    """A key prefix no other test uses; every key under it is deleted afterwards."""
    prefix = f"ragloop-test:{uuid.uuid4().hex}"
    yield prefix
    keys = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        redis_client.delete(*keys)
