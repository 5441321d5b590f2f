"""Fixtures for the experiments tests: the real Redis on 127.0.0.1:6379 (or RAGLOOP_TEST_REDIS_URL).

When Redis is unreachable the Redis tests are skipped with the reason, except under `CI=true`,
where they fail: CI must exercise the cache path (the twin of tests/store's `require_postgres`).
Every test gets its own key prefix and its keys are deleted afterwards, so tests never see each
other's assignments nor anything else on the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.store.conftest import backend, clock, db, postgres_admin_url, redis_test_url, store, store_url  # noqa: F401 (fixtures)


@pytest.fixture(scope="session")
def redis_url() -> str:
    return redis_test_url()


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
