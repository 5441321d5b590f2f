"""pgvector beyond the shared conformance suite (tests/retrieval/test_dense.py): recall against
exact search at the embedder's dimension, rows seen from other connections, writers that do not
clash, wide k, generation clean-up, and the dev server command. All against a real server
(`pgvector_server` in tests/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from ragloop.config.pipeline import LexicalConfig, PipelineConfig
from ragloop.ingest.types import Chunk
from ragloop.retrieval import pgvector_index
from ragloop.retrieval.dense import ExactIndex, load_vector_index
from ragloop.retrieval.pgvector_index import (
    PgVectorIndex,
    PgVectorUnavailable,
    copy_blocks,
    copy_payload,
    pgvector_url,
)
from ragloop.retrieval.store import IndexSpec, gen_dir, load_generation, remove_stale, write_generation
from tests.store.conftest import DEFAULT_POSTGRES_URL, _ci, require_postgres


def unit(rows: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def table_exists(url: str, table: str) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table]).fetchone() == (True,)


MakeIndex = Callable[..., PgVectorIndex]


@pytest.fixture
def index(pgvector_url: str) -> Iterator[MakeIndex]:
    made: list[PgVectorIndex] = []

    def factory(dim: int, **kw: Any) -> PgVectorIndex:
        made.append(PgVectorIndex(dim, pgvector_url, **kw))
        return made[-1]

    yield factory
    for ix in made:
        ix.drop()


def test_recall_at_10_against_exact_on_384d_random_vectors(index: MakeIndex) -> None:
    """Isotropic random vectors are HNSW's hard case (no cluster structure to exploit)."""
    data, queries = unit(3000, 384, 1), unit(40, 384, 2)
    exact = ExactIndex(384)
    exact.add(data)
    pg = index(384)
    pg.add(data)
    truth, _ = exact.search_many(queries, 10)
    got, scores = pg.search_many(queries, 10)
    recall = np.mean([len(set(a) & set(t)) / 10 for a, t in zip(got.tolist(), truth.tolist(), strict=True)])
    assert recall >= 0.95, recall
    np.testing.assert_allclose(scores, np.einsum("qd,qnd->qn", queries, data[got]), atol=1e-5)


def test_rows_are_shared_across_connections_and_writers_do_not_clash(index: MakeIndex, pgvector_url: str) -> None:
    data = unit(400, 32, 3)
    a = index(32)
    a.add(data[:300])
    b = PgVectorIndex(32, pgvector_url, table=a.table)  # another process, in effect
    assert len(b) == 300
    np.testing.assert_array_equal(b.search(data[123], 3)[0], a.search(data[123], 3)[0])
    b.add(data[300:350])  # a writer that did not know a's length continues after a's rows
    a.add(data[350:])  # a's cached length is stale; the table's end decides the ids
    assert len(a) == 400
    b.close()
    c = PgVectorIndex(32, pgvector_url, table=a.table)
    assert len(c) == 400
    for row in (0, 310, 399):
        assert c.search(data[row], 1)[0].tolist() == [row]
    c.close()
    with pytest.raises(ValueError, match="dimension"):
        PgVectorIndex(16, pgvector_url, table=a.table)


def test_k_beyond_ef_search_is_not_cut_short(index: MakeIndex) -> None:
    data = unit(500, 16, 4)
    pg = index(16, ef_search=10)
    pg.add(data)
    ids, _ = pg.search_many(data[:2], 60)
    assert (ids >= 0).all() and ids.shape == (2, 60)
    exact = ExactIndex(16)
    exact.add(data)
    truth, _ = exact.search_many(data[:2], 60)
    assert np.mean([len(set(a) & set(t)) / 60 for a, t in zip(ids.tolist(), truth.tolist(), strict=True)]) >= 0.9


def test_large_second_batch_rebuilds_and_small_one_grows_the_graph(index: MakeIndex, pgvector_url: str) -> None:
    import psycopg

    data = unit(700, 16, 5)
    pg = index(16)
    pg.add(data[:400])
    pg.add(data[400:690])  # >= 0.25 x 400: index dropped and rebuilt
    pg.add(data[690:])  # small: grows the graph
    with psycopg.connect(pgvector_url) as conn:
        found = conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = %s", [pg.table]).fetchone()
    assert found == (2,)  # primary key + one HNSW index
    for row in (5, 500, 699):
        assert pg.search(data[row], 1)[0].tolist() == [row]


def test_copy_payload_is_pgvectors_binary_row_format() -> None:
    rows = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    payload = copy_payload(7, rows)
    assert payload.startswith(b"PGCOPY\n\xff\r\n\x00") and payload.endswith(b"\xff\xff")
    first = payload[19 : 19 + 2 + 4 + 8 + 4 + 4 + 8]
    assert first[:2] == b"\x00\x02" and int.from_bytes(first[6:14], "big") == 7
    assert np.frombuffer(first[22:], dtype=">f4").tolist() == [1.0, 0.0]


def test_copy_blocks_stream_the_same_bytes_as_one_payload() -> None:
    rows = unit(7, 3, 9)
    assert b"".join(copy_blocks(5, rows, block_rows=2)) == copy_payload(5, rows)
    assert len(list(copy_blocks(5, rows, block_rows=2))) == 1 + 4 + 1  # header, ceil(7 / 2) blocks, trailer


def test_a_load_in_many_copy_blocks_keeps_every_row_and_id(index: MakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgvector_index, "COPY_BLOCK_ROWS", 64)  # 500 rows: 8 COPY messages
    data = unit(500, 16, 6)
    pg = index(16)
    pg.add(data)
    assert len(pg) == 500
    for row in (0, 63, 64, 499):
        assert pg.search(data[row], 1)[0].tolist() == [row]


def test_url_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGLOOP_PGVECTOR_URL", raising=False)
    monkeypatch.delenv("RAGLOOP_COLLECTIONS_URL", raising=False)
    with pytest.raises(ValueError, match="RAGLOOP_PGVECTOR_URL"):
        pgvector_url()
    monkeypatch.setenv("RAGLOOP_COLLECTIONS_URL", "postgresql+psycopg://u:secret@h:5/db")
    assert pgvector_url() == "postgresql://u:secret@h:5/db"
    monkeypatch.setenv("RAGLOOP_PGVECTOR_URL", "postgresql://x@y/z")
    assert pgvector_url() == "postgresql://x@y/z"


def test_server_without_the_extension_says_so() -> None:
    """The machine's own PostgreSQL 15 has no pgvector: the error names the fix."""
    url = require_postgres(DEFAULT_POSTGRES_URL, ci=_ci())
    with pytest.raises(PgVectorUnavailable, match="pgvector-server"):
        PgVectorIndex(8, url)


def test_pipeline_generation_keeps_vectors_in_pgvector_and_drops_them_with_the_generation(
    pgvector_url: str, tmp_path: Path
) -> None:
    cfg = PipelineConfig.model_validate({"retrieval": {"dense": {"backend": "pgvector"}}})
    assert cfg.retrieval.dense.backend == "pgvector"
    chunks = [Chunk(f"c{i}", "d", i, f"text {i}") for i in range(50)]
    vectors = unit(50, 24, 6)
    tables = []
    for generation in (1, 2, 3):
        write_generation(
            tmp_path,
            generation,
            chunks,
            vectors,
            IndexSpec(
                lexical=LexicalConfig(),
                embedder="test",
                fingerprint="f",
                dense_backend="pgvector",
                ann_threshold=0,
                index_headings=False,
            ),
        )
        meta = json.loads((gen_dir(tmp_path, generation) / "ann" / "vectors.json").read_text())
        assert meta["backend"] == "pgvector" and meta["count"] == 50
        tables.append(meta["table"])
    gen = load_generation(gen_dir(tmp_path, 3))
    assert gen.vectors_index.name == "pgvector" and len(gen.vectors_index) == 50
    assert gen.vectors_index.search(vectors[17], 1)[0].tolist() == [17]
    remove_stale(tmp_path, 3)  # keeps generations 3 and 2
    assert [table_exists(pgvector_url, t) for t in tables] == [False, True, True]
    assert isinstance(load_vector_index(gen_dir(tmp_path, 2) / "ann"), PgVectorIndex)
    for t in tables[1:]:
        PgVectorIndex(24, pgvector_url, table=t).drop()


def test_dev_command_returns_the_running_server(pgvector_server: tuple[str, Path | None]) -> None:
    url, folder = pgvector_server
    if folder is None:
        pytest.skip("RAGLOOP_TEST_PGVECTOR_URL names an external server: nothing was started here")
    from ragloop.cli import app

    port = int(url.rsplit(":", 1)[1].split("/")[0])
    result = CliRunner().invoke(app, ["dev", "pgvector-server", "--dir", str(folder), "--port", str(port), "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["url"] == url and shown["port"] == port


def test_database_backend_writes_inside_the_callers_transaction(pgvector_url: str) -> None:
    """The PostgreSQL collection's hook: rows and graph commit, or vanish, with the generation."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    from ragloop.retrieval.pgvector_index import PgVectorDatabaseBackend
    from ragloop.store.db import normalize_url

    backend = PgVectorDatabaseBackend()
    engine = create_engine(normalize_url(pgvector_url), poolclass=NullPool)
    schema = "rl_test_dbbackend"
    data = unit(300, 24, 8)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            conn.execute(text(f"CREATE SCHEMA {schema}"))
            assert backend.available(conn)
        with pytest.raises(RuntimeError, match="abandoned"), engine.begin() as conn:
            backend.write(conn, schema, 1, data)
            raise RuntimeError("abandoned")  # the staging transaction fails after the write
        assert not table_exists(pgvector_url, backend.table(schema, 1))
        with engine.begin() as conn:
            backend.write(conn, schema, 2, data)
        index = backend.open(engine, schema, 2, 24)
        assert len(index) == 300 and index.search(data[42], 1)[0].tolist() == [42]
        index.close()
        with pytest.raises(LookupError):
            backend.open(engine, schema, 3, 24)  # never written: no empty table made up
        with engine.begin() as conn:
            backend.delete(conn, schema, [2, 3])
        assert not table_exists(pgvector_url, backend.table(schema, 2))
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        engine.dispose()


def test_database_backend_is_unavailable_without_the_extension() -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from ragloop.retrieval.pgvector_index import PgVectorDatabaseBackend

    engine = create_engine(require_postgres(DEFAULT_POSTGRES_URL, ci=_ci()), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            assert not PgVectorDatabaseBackend.available(conn)
    finally:
        engine.dispose()
