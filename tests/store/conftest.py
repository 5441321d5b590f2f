"""The store conformance suite runs every test against SQLite and PostgreSQL.

`store_url` is parametrised over both backends. SQLite gets a fresh file per test; PostgreSQL
(127.0.0.1:5432, trust auth, database `test`, or `RAGLOOP_TEST_POSTGRES_URL`) gets a fresh schema
per test, selected through the connection's `search_path` and dropped afterwards, so tests never
see each other's rows. When PostgreSQL is unreachable the PostgreSQL half is skipped with the
reason, except under `CI=true`, where it fails: CI must exercise both backends.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from ragloop.store import Answer, Database, EvaluationQueue, Store, upgrade

POSTGRES_URL_ENV = "RAGLOOP_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_postgres(url: str, *, ci: bool) -> str:
    """`url` if a PostgreSQL server answers there; otherwise skip, or fail when `ci` (CI=true)."""
    shown = make_url(url).render_as_string(hide_password=True)
    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 3})
    problem = None
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        problem = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    finally:
        engine.dispose()
    if problem is None:
        return url
    reason = f"PostgreSQL at {shown} is unreachable ({problem})"
    if ci:
        pytest.fail(f"{reason}; CI=true requires the PostgreSQL half of the store conformance suite", pytrace=False)
    pytest.skip(f"{reason}; start it (pg_ctlcluster … main start) or set {POSTGRES_URL_ENV}")


REDIS_URL_ENV = "RAGLOOP_TEST_REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def require_redis(url: str, *, ci: bool) -> str:
    """`url` if a Redis server answers PING there; otherwise skip, or fail when `ci` (CI=true): the
    twin of `require_postgres` for the expansion-cache and assignment tests."""
    import redis

    problem = None
    client = redis.Redis.from_url(url, socket_connect_timeout=2.0, socket_timeout=2.0)
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
        pytest.fail(f"{reason}; CI=true requires the Redis-backed tests", pytrace=False)
    pytest.skip(f"{reason}; start redis-server or set {REDIS_URL_ENV}")


def redis_test_url() -> str:
    return require_redis(os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL), ci=_ci())


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """The PostgreSQL server URL; skips (or, under CI=true, fails) when the server is unreachable."""
    return require_postgres(os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL), ci=_ci())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL to an empty database of the backend under test (not migrated)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'ragloop.db'}"
        return
    admin_url = request.getfixturevalue("postgres_admin_url")
    schema = f"t_{secrets.token_hex(6)}"
    admin = create_engine(admin_url, poolclass=NullPool)
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        url = make_url(admin_url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


@pytest.fixture
def db(store_url: str) -> Iterator[Database]:
    """A migrated database."""
    database = Database.from_url(store_url)
    upgrade(database.engine)
    try:
        yield database
    finally:
        database.dispose()


class FakeClock:
    """A settable UTC clock for the queue."""

    def __init__(self) -> None:
        self.now = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(db: Database, clock: FakeClock) -> Store:
    """Every repository over the migrated database; the queue runs on the fake clock."""
    return Store(db, queue=EvaluationQueue(db, clock=clock, backoff_base_s=2.0, max_attempts=3))


@pytest.fixture
def make_answer(store: Store) -> Callable[..., Answer]:
    counter = iter(range(1_000_000))

    def make(session_id: str = "s1", **kwargs: object) -> Answer:
        n = next(counter)
        fields: dict[str, object] = {
            "question": f"question {n}?",
            "answer_text": f"answer {n} [1]",
            "pipeline_version": "pv-test",
            "citations": [{"chunk_id": f"c{n}", "doc_id": "d1", "title": "T", "excerpt": "…", "score": 0.9}],
        }
        fields.update(kwargs)
        return store.queries.record_answer(session_id=session_id, **fields)  # type: ignore[arg-type]

    return make
