"""A PostgreSQL collection on a server with pgvector keeps its vectors in a pgvector table with an
HNSW index and searches them in SQL, by default (`dense.backend: auto`); on a server without the
extension a config naming pgvector searches in memory. (tests/kb/test_pg_collection.py covers the
named backend and pruning.)"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from ragloop.config import PipelineConfig, Settings
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.dense import ExactIndex
from ragloop.retrieval.pgstore import schema_for
from ragloop.retrieval.pgvector_index import PgVectorIndex
from ragloop.retrieval.retriever import Retriever
from ragloop.store.db import normalize_url
from tests.conftest import drop_collection_schemas

HASHED = PipelineConfig().with_overrides(retrieval={"dense": {"embedder": "test:hashed"}})


@pytest.fixture
def pgv(pgvector_url: str) -> Iterator[str]:
    yield pgvector_url
    gc.collect()  # dropped collections give their connections back before the schemas go
    drop_collection_schemas(pgvector_url)


def _docs(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "walk.md").write_text("# os.walk\n\nGenerate the file names in a directory tree by walking it.\n")
    (root / "json.md").write_text("# json\n\nParse a JSON document with json.loads.\n")
    return root


def _vector_tables(url: str, name: str) -> list[str]:
    engine = create_engine(normalize_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = :s AND tablename LIKE 'pgvector_g%'"),
                {"s": schema_for(name)},
            )
            return sorted(found.scalars())
    finally:
        engine.dispose()


def test_auto_backend_searches_pgvector_in_sql_and_prunes_its_tables(tmp_path: Path, pgv: str) -> None:
    a = Collection("vec", Settings(home=tmp_path / "a", collections_url=pgv))
    b = Collection("vec", Settings(home=tmp_path / "b", collections_url=pgv))
    try:
        root = _docs(tmp_path / "docs")
        a.ingest([root], HASHED)  # dense.backend auto
        gen = b.load()
        assert gen.manifest.dense_backend == "pgvector" and isinstance(gen.vectors_index, PgVectorIndex)
        assert len(gen.vectors_index) == len(gen.chunks)
        assert Retriever(b, HASHED.retrieval).retrieve("directory tree", k=1)[0].doc_id == "walk.md"
        assert b.stats()["dense_backend"] == "pgvector"
        (root / "asyncio.md").write_text("# asyncio\n\nThe event loop runs coroutines and callbacks.\n")
        a.ingest([root], HASHED)
        b.delete_documents(["json.md"])
        assert _vector_tables(pgv, "vec") == ["pgvector_g000002", "pgvector_g000003"]  # gen 1 pruned
        assert Retriever(a, HASHED.retrieval).retrieve("event loop coroutines", k=1)[0].doc_id == "asyncio.md"
    finally:
        a.close()
        b.close()


def test_named_pgvector_falls_back_to_exact_on_a_server_without_it(
    tmp_path: Path, kb_postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = HASHED.with_overrides(retrieval={"dense": {"backend": "pgvector"}})
    coll = Collection("novec", Settings(home=tmp_path / "h", collections_url=kb_postgres_url))
    try:
        coll.ingest([_docs(tmp_path / "docs")], cfg)
        gen = coll.load()
        assert gen.manifest.dense_backend == "exact" and isinstance(gen.vectors_index, ExactIndex)
        assert Retriever(coll, cfg.retrieval).retrieve("directory tree", k=1)[0].doc_id == "walk.md"
        assert "is searched exactly" in caplog.text
    finally:
        coll.close()
        gc.collect()
        drop_collection_schemas(kb_postgres_url)
