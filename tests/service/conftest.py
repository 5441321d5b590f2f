"""Fixtures for the service tests: a tiny real collection (hashed embedder, lexical scorers: the
offline pipeline, fast and deterministic), a store on SQLite or PostgreSQL, the app in-process over
httpx's ASGI transport (lifespan included), and API keys.

The worker is off in the app unless a test turns it on: tests drive `EvaluationWorker.run(drain=True)`
themselves so the order of events is deterministic.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from ragloop.config import PipelineConfig, Settings
from ragloop.improve.judge import Judge, ScorerJudge
from ragloop.models.scoring import make_scorer
from ragloop.retrieval.collection import Collection
from ragloop.service import ServiceConfig, create_app
from ragloop.service.worker import EvaluationWorker
from ragloop.store import EvaluationQueue, Store
from tests.agent.conftest import DOCS, HASHED, make_collection
from tests.store.conftest import DEFAULT_POSTGRES_URL, POSTGRES_URL_ENV, _ci, require_postgres

CFG: PipelineConfig = HASHED.with_overrides(
    agent={"scorers": {"grade": "lexical", "refine": "lexical", "support": "lexical"}}
)
# no random tier-2 sample: a test that routes an answer to tier 2 must be the one that routes it
SERVICE = ServiceConfig(
    judge="lexical", heuristic_support="lexical", inprocess_worker=False, poll_interval_s=0.05, tier2_sample_rate=0.0
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def collection(tmp_path: Path) -> Iterator[Collection]:
    """The `default` collection: four short articles about an invented bridge, tower, ferry and trams."""
    c = make_collection("default", DOCS, tmp_path / "docs")
    yield c
    c.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store' / 'ragloop.db'}"


def _postgres_schema_url(request: pytest.FixtureRequest) -> Iterator[str]:
    import os

    admin_url = require_postgres(os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL), ci=_ci())
    schema = f"svc_{secrets.token_hex(6)}"
    admin = create_engine(admin_url, poolclass=NullPool)
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        yield (
            make_url(admin_url)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


@pytest.fixture
def store_url(backend: str, sqlite_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    if backend == "sqlite":
        yield sqlite_url
        return
    yield from _postgres_schema_url(request)


@pytest.fixture
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh PostgreSQL schema for tests that are about PostgreSQL only (skipped when the server is
    unreachable; under CI=true, failed)."""
    yield from _postgres_schema_url(request)


def open_store(url: str) -> Store:
    store = Store.open(url)
    # fast retries for tests (the production backoff starts at 2 s)
    store.queue = EvaluationQueue(store.db, backoff_base_s=0.01, backoff_max_s=0.05, max_attempts=3)
    return store


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    s = open_store(sqlite_url)
    yield s
    s.close()


@pytest.fixture
def any_store(store_url: str) -> Iterator[Store]:
    """A store on SQLite and (a second run) on PostgreSQL."""
    s = open_store(store_url)
    yield s
    s.close()


@dataclass
class Keys:
    user: str
    admin: str
    other: str

    @staticmethod
    def h(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    @property
    def u(self) -> dict[str, str]:
        return self.h(self.user)

    @property
    def a(self) -> dict[str, str]:
        return self.h(self.admin)


def make_keys(store: Store) -> Keys:
    return Keys(
        user=store.api_keys.create_api_key("user", name="user", rate_limit_per_minute=10_000).key,
        admin=store.api_keys.create_api_key("admin", name="admin", rate_limit_per_minute=10_000).key,
        other=store.api_keys.create_api_key("user", name="other", rate_limit_per_minute=10_000).key,
    )


def build_app(store: Store, **kwargs: Any) -> FastAPI:
    kwargs.setdefault("config", CFG)
    kwargs.setdefault("service_config", SERVICE)
    return create_app(Settings(), store=store, **kwargs)


@asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan, behind an httpx client on the ASGI transport."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ragloop.test", timeout=60) as client:
            yield client


def worker_for(store: Store, judge: Judge | None = None, **changes: Any) -> EvaluationWorker:
    """A worker with the lexical judge and support scorer (override `judge=`)."""
    return EvaluationWorker(
        store,
        SERVICE.with_(**changes) if changes else SERVICE,
        judge=judge if judge is not None else ScorerJudge(make_scorer("lexical")),
        support_scorer=make_scorer("lexical"),
    )


AskFn = Callable[..., Any]
