"""Fixtures for the diagnosis tests: a tiny real collection (hashed embedder, lexical scorer).

The documents are written so each branch of the decision tree has a case: `bridge.md` answers
"When was the Zorblat Bridge completed?", `ferry.md` and `tower.md` are on-topic neighbours.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragloop.improve.oracle import OracleRetriever
from ragloop.models.scoring import LexicalScorer
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever
from ragloop.store import Store
from tests.agent.conftest import DOCS, HASHED, make_collection
from tests.store.conftest import backend, clock, db, postgres_admin_url, store, store_url  # noqa: F401 (fixtures)

QUESTION = "When was the Zorblat Bridge completed?"
IDEAL = "1887"


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = make_collection("kb", DOCS, tmp_path / "docs")
    yield c
    c.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """A migrated SQLite store on the real clock, for tests of remediation logic that override the
    backend-parametrized `store` (tests/store covers both backends) with it."""
    s = Store.open(f"sqlite:///{tmp_path / 'ragloop.db'}")
    yield s
    s.close()


@pytest.fixture
def scorer() -> LexicalScorer:
    return LexicalScorer(name="lexical")


@pytest.fixture
def oracle(coll: Collection, scorer: LexicalScorer) -> OracleRetriever:
    return OracleRetriever(coll, scorer, config=HASHED.retrieval)


def served(coll: Collection) -> Retriever:
    return Retriever(coll, HASHED.retrieval.model_copy(update={"use_expansion_cache": False}))
