"""A collection on PostgreSQL is one knowledge base for every instance: what one ingests, another
serves; a writer that dies between storing the rows and moving the pointer changes nothing."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from ragloop.config import PipelineConfig, Settings
from ragloop.ingest.registry import RegistryTxn
from ragloop.retrieval.collection import Collection, list_collections
from ragloop.retrieval.pgstore import chunks_table, generations_table, schema_for
from ragloop.retrieval.retriever import Retriever
from ragloop.store.db import normalize_url
from tests.conftest import drop_collection_schemas

pytestmark = pytest.mark.postgres

HASHED = PipelineConfig().with_overrides(retrieval={"dense": {"embedder": "test:hashed"}})


@pytest.fixture
def pg_url(kb_postgres_url: str) -> Iterator[str]:
    """The session's scratch database, emptied of collections after the test."""
    yield kb_postgres_url
    gc.collect()
    drop_collection_schemas(kb_postgres_url)


def _instance(tmp_path: Path, name: str, url: str) -> Settings:
    """Settings of one server: its own home, the shared collections database."""
    return Settings(home=tmp_path / name, collections_url=url)


def _docs(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "walk.md").write_text("# os.walk\n\nGenerate the file names in a directory tree by walking it.\n")
    (root / "json.md").write_text("# json\n\nParse a JSON document with json.loads.\n")
    return root


def _stored_generations(url: str, name: str) -> list[int]:
    engine = create_engine(normalize_url(url), poolclass=NullPool).execution_options(
        schema_translate_map={None: schema_for(name)}
    )
    try:
        with engine.connect() as conn:
            gens = set(conn.execute(select(generations_table.c.generation)).scalars())
            gens |= set(conn.execute(select(chunks_table.c.generation).distinct()).scalars())
    finally:
        engine.dispose()
    return sorted(gens)


def test_an_ingest_on_one_instance_is_served_by_another(tmp_path: Path, pg_url: str) -> None:
    a = Collection("shared", _instance(tmp_path, "a", pg_url))
    b = Collection("shared", _instance(tmp_path, "b", pg_url))
    try:
        assert not b.exists() and b.generation() == 0
        root = _docs(tmp_path / "docs")
        a.ingest([root], HASHED)
        assert b.exists() and b.generation() == 1
        assert "shared" in list_collections(b.settings)
        assert Retriever(b, HASHED.retrieval).retrieve("directory tree", k=1)[0].doc_id == "walk.md"
        first = b.load()

        (root / "asyncio.md").write_text("# asyncio\n\nThe event loop runs coroutines and callbacks.\n")
        a.ingest([root], HASHED)
        assert b.load() is not first and b.generation() == 2  # the pointer moved: b reloads
        assert Retriever(b, HASHED.retrieval).retrieve("event loop coroutines", k=1)[0].doc_id == "asyncio.md"
        assert b.stats()["files"] == 3 and int(b.stats()["bytes"]) > 0  # type: ignore[call-overload]
        assert not (tmp_path / "a" / "collections").exists()  # nothing of the index in either home
        assert not (tmp_path / "b" / "collections").exists()

        b.delete_documents(["json.md"])  # any instance may write
        assert "json.md" not in {c.doc_id for c in a.load().chunks}
        assert _stored_generations(pg_url, "shared") == [2, 3]  # older ones pruned
    finally:
        a.close()
        b.close()


def test_a_crash_before_the_pointer_moves_leaves_the_old_generation(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = Collection("kb", _instance(tmp_path, "a", pg_url))
    b = Collection("kb", _instance(tmp_path, "b", pg_url))
    try:
        root = _docs(tmp_path / "docs")
        a.ingest([root], HASHED)
        served = {c.chunk_id for c in b.load().chunks}
        (root / "new.md").write_text("# New\n\nA fresh document about event loops.\n")
        staged: list[int] = []
        real_stage = a.storage.stage

        def stage_then_die(generation: int, *args: object, **kwargs: object) -> None:
            real_stage(generation, *args, **kwargs)  # type: ignore[arg-type]
            staged.extend(_stored_generations(pg_url, "kb"))  # the rows are in, committed
            raise RuntimeError("injected crash between the rows and the pointer")

        monkeypatch.setattr(a.storage, "stage", stage_then_die)
        with pytest.raises(RuntimeError, match="injected crash"):
            a.ingest([root], HASHED)
        monkeypatch.undo()
        assert staged == [1, 2]  # generation 2 was fully written ...
        assert b.generation() == 1 and {c.chunk_id for c in b.load().chunks} == served  # ... never served
        assert "new.md" not in b.registry.files()
        assert _stored_generations(pg_url, "kb") == [1]  # and removed again: no garbage

        # a writer killed outright leaves its rows (no cleanup ran); readers still never see them,
        # and the next ingest replaces them
        def pointer_fails(*_a: object) -> None:
            raise KeyboardInterrupt

        with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
            m.setattr(RegistryTxn, "set_state", pointer_fails)
            m.setattr(a.storage, "discard", lambda _g: None)  # as if killed: no cleanup
            a.ingest([root], HASHED)
        assert _stored_generations(pg_url, "kb") == [1, 2]
        assert b.generation() == 1 and {c.chunk_id for c in b.load().chunks} == served
        s = b.ingest([root], HASHED)
        assert (s.new, s.generation) == (1, 2) and "new.md" in {c.doc_id for c in a.load().chunks}
    finally:
        a.close()
        b.close()


def test_two_instances_never_write_one_collection_at_once(tmp_path: Path, pg_url: str) -> None:
    a = Collection("kb", _instance(tmp_path, "a", pg_url))
    b = Collection("kb", _instance(tmp_path, "b", pg_url))
    other = Collection("other", _instance(tmp_path, "b", pg_url))
    order: list[str] = []
    try:
        with a.exclusive():
            t = threading.Thread(target=lambda: _hold(b, order))
            t.start()
            with other.exclusive():  # another collection's lock is independent
                order.append("other")
            time.sleep(0.3)
            order.append("a done")
        t.join(10)
        assert order == ["other", "a done", "b"]
    finally:
        for c in (a, b, other):
            c.close()


def _hold(coll: Collection, order: list[str]) -> None:
    with coll.exclusive():
        order.append("b")


def test_a_pgvector_generation_is_searched_on_the_server_and_dropped_with_it(tmp_path: Path, pgvector_url: str) -> None:
    """`dense.backend = pgvector` on a PostgreSQL collection: the vectors are indexed in a server
    table every instance searches; pruning a generation drops its table."""
    from ragloop.retrieval.pgvector_index import PgVectorIndex

    config = HASHED.with_overrides(retrieval={"dense": {"backend": "pgvector"}})
    a = Collection("pgv", _instance(tmp_path, "a", pgvector_url))
    b = Collection("pgv", _instance(tmp_path, "b", pgvector_url))
    root = _docs(tmp_path / "docs")
    try:
        a.ingest([root], config)
        index = b.load().vectors_index
        assert isinstance(index, PgVectorIndex) and len(index) == len(b.load().chunks)
        hits = Retriever(b, config.retrieval).retrieve("directory tree", k=1, mode="dense")
        assert hits[0].doc_id == "walk.md"
        first = index.table
        for i in range(2):  # generations 2 and 3: generation 1 is pruned, and its table with it
            (root / f"extra{i}.md").write_text(f"# Extra {i}\n\nMore text number {i} about queues.\n")
            a.ingest([root], config)
        engine = create_engine(normalize_url(pgvector_url), poolclass=NullPool)
        try:
            with engine.connect() as conn:
                assert conn.execute(text("SELECT to_regclass(:t)"), {"t": first}).scalar() is None
                current = b.load().vectors_index
                assert isinstance(current, PgVectorIndex) and current.table != first
                assert conn.execute(text("SELECT to_regclass(:t)"), {"t": current.table}).scalar() is not None
        finally:
            engine.dispose()
    finally:
        a.close()
        b.close()
        gc.collect()
        drop_collection_schemas(pgvector_url)
