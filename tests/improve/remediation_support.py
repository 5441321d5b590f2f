"""Shared pieces of the remediation, scheduler and auditor tests: a store, a context over a tiny
real collection (hashed embedder), proposing actions, and the Redis and PostgreSQL requirements
(skip when unreachable, fail under CI=true, like the store conformance suite)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from ragloop.config import PipelineConfig
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediation import (
    RegistryExpansionBackend,
    RemediationContext,
    RemediationSettings,
)
from ragloop.improve.types import ActionKind
from ragloop.retrieval.collection import Collection
from ragloop.store import ImprovementAction, Store, question_hash
from tests.agent.conftest import HASHED
from tests.store.conftest import DEFAULT_POSTGRES_URL, POSTGRES_URL_ENV, _ci, redis_test_url, require_postgres

QUESTION = "When was the Zorblat Bridge completed?"
PARAPHRASE = "When was the Zorblat Bridge finally completed?"
"""cos 0.934 to QUESTION under the hashed embedder; the exact pin (normalised string) misses it."""
K1 = HASHED.with_overrides(retrieval={"k": 1})
"""Query-time k only: the index fingerprint stays HASHED's."""


def redis_url() -> str:
    return redis_test_url()


@contextmanager
def postgres_schema_url() -> Iterator[str]:
    """A URL into a fresh schema of the test PostgreSQL server (dropped afterwards)."""
    admin_url = require_postgres(os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL), ci=_ci())
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


def context(
    store: Store,
    coll: Collection,
    clock: ManualClock,
    *,
    config: PipelineConfig = K1,
    backend: Any = None,
    **settings: Any,
) -> RemediationContext:
    backend = backend or RegistryExpansionBackend(coll.registry)

    def collections(name: str) -> Collection:
        assert name == coll.name, f"unexpected collection {name!r}"
        return coll

    return RemediationContext(
        store=store,
        config=config,
        collections=collections,
        expansion_backend=lambda _name: backend,
        clock=clock,
        settings=RemediationSettings(**settings),
    )


def chunk_of(coll: Collection, doc_id: str) -> str:
    return next(c.chunk_id for c in coll.load().chunks if c.doc_id == doc_id)


def propose_expansion(
    store: Store,
    coll: Collection,
    question: str,
    chunk_ids: list[str],
    *,
    confidence: float = 0.8,
    user_reported: bool = False,
    answers: int = 1,
    expected: float | None = None,
) -> ImprovementAction:
    """An expansion action as the diagnosis pass proposes it (`ragloop.improve.proposals.spec_for`):
    one component per collection, the question's hash as the dedupe key, no expected delta."""
    return store.improvement_actions.propose(
        ActionKind.EXPANSION_CACHE.value,
        f"expansion_cache:{coll.name}",
        question_hash(question),
        domain=coll.name,
        answer_ids=[f"a-{secrets.token_hex(4)}" for _ in range(answers)],
        evidence={"confidence": confidence, "failure_mode": "embedding_failure", "user_reported": user_reported},
        expected_delta=None if expected is None else {"metric": "target_recall_at_k", "value": expected},
        payload={"collection": coll.name, "question": question, "chunk_ids": chunk_ids, "doc_id": None},
    ).action


def propose_rechunk(
    store: Store, coll: Collection, doc_id: str, key: str, question: str = "", *, answers: int = 1
) -> ImprovementAction:
    return store.improvement_actions.propose(
        ActionKind.RECHUNK_DOCUMENT.value,
        f"doc:{coll.name}/{doc_id}",
        key,
        domain=coll.name,
        answer_ids=[f"a-{secrets.token_hex(4)}" for _ in range(answers)],
        evidence={"confidence": 0.8, "failure_mode": "chunking_failure"},
        payload={"collection": coll.name, "question": question, "doc_id": doc_id, "chunk_ids": []},
    ).action
