"""Migrations, engines and the shape of the schema, on both backends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from ragloop.store import (
    TABLE_NAMES,
    Base,
    Database,
    Store,
    current_revision,
    default_database_url,
    downgrade,
    head_revision,
    make_engine,
    normalize_url,
    upgrade,
)

EXPECTED_TABLES = {
    "queries",
    "answers",
    "evaluations",
    "user_feedback",
    "golden_set_entries",
    "golden_set_versions",
    "golden_candidates",
    "regression_runs",
    "experiments",
    "pipeline_versions",
    "improvement_audit_log",
    "model_calls",
    "api_keys",
    "evaluation_jobs",
    "document_jobs",
    "diagnoses",
    "knowledge_gaps",
    "improvement_actions",
    "service_settings",
}


def test_upgrade_creates_every_table_and_is_idempotent(store_url: str) -> None:
    assert current_revision(store_url) is None
    assert upgrade(store_url) == head_revision()
    assert upgrade(store_url) == head_revision()  # second run: nothing to do, no error
    engine = make_engine(store_url)
    try:
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert set(TABLE_NAMES) == EXPECTED_TABLES
    assert tables == EXPECTED_TABLES | {"alembic_version"}


def test_migrated_schema_matches_the_models(store_url: str) -> None:
    """A column added to models.py without a migration (or vice versa) fails here."""
    upgrade(store_url)
    engine = make_engine(store_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_downgrade_to_base_and_back(store_url: str) -> None:
    upgrade(store_url)
    assert downgrade(store_url, "base") is None
    engine = make_engine(store_url)
    try:
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
    assert upgrade(store_url) == head_revision()


def test_upgrade_from_the_previous_revision_keeps_the_data(store_url: str) -> None:
    """A database made by the first release (0001) gains `document_jobs` and keeps its rows; the
    downgrade takes exactly that table away again."""
    assert upgrade(store_url, "0001_initial") == "0001_initial"
    with Store.open(store_url, migrate=False) as old:
        key = old.api_keys.create_api_key("admin", name="before")
    engine = make_engine(store_url)
    try:
        assert "document_jobs" not in inspect(engine).get_table_names()
        assert upgrade(engine) == head_revision()
        assert "document_jobs" in inspect(engine).get_table_names()
        with Store(Database(engine)) as store:
            assert store.api_keys.verify_api_key(key.key) is not None
            store.document_jobs.create("j", owner="o", collection="c", kind="ingest", files=["a.md"])
            assert store.document_jobs.get("j") is not None
        assert downgrade(engine, "0001_initial") == "0001_initial"
        tables = set(inspect(engine).get_table_names())
        assert "document_jobs" not in tables and "api_keys" in tables
    finally:
        engine.dispose()


def test_upgrade_from_0002_adds_the_improvement_tables(store_url: str) -> None:
    """A database at 0002 (document jobs) gains `diagnoses`, `knowledge_gaps` and `improvement_actions`
    and keeps its rows; the downgrade takes exactly those tables away again."""
    assert upgrade(store_url, "0002_document_jobs") == "0002_document_jobs"
    with Store.open(store_url, migrate=False) as old:
        answer = old.queries.record_answer(session_id="s", question="q?", answer_text="a", pipeline_version="pv")
    engine = make_engine(store_url)
    improve = {"diagnoses", "knowledge_gaps", "improvement_actions"}
    try:
        assert not improve & set(inspect(engine).get_table_names())
        assert upgrade(engine) == head_revision()
        assert improve <= set(inspect(engine).get_table_names())
        with Store(Database(engine)) as store:
            assert store.queries.get_answer(answer.answer_id) is not None
            store.diagnoses.open(answer.answer_id, reasons=["negative_feedback"])
            assert store.improvement_actions.propose("expansion_cache", "expansion_cache", "k").created
        assert downgrade(engine, "0002_document_jobs") == "0002_document_jobs"
        tables = set(inspect(engine).get_table_names())
        assert not improve & tables and {"answers", "document_jobs"} <= tables
    finally:
        engine.dispose()


def test_timestamps_and_json_round_trip(db: Database) -> None:
    store = Store(db)
    answer = store.queries.record_answer(
        session_id="s",
        question="q?",
        answer_text="a",
        pipeline_version="pv-1",
        trace={"nodes": [{"name": "retrieve", "scores": [0.5, 0.25]}], "unicode": "é✓"},
    )
    again = store.queries.get_answer(answer.answer_id)
    assert again is not None
    assert again.created_at.tzinfo is not None and again.created_at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert again.created_at == answer.created_at
    assert again.trace == {"nodes": [{"name": "retrieve", "scores": [0.5, 0.25]}], "unicode": "é✓"}
    assert len(answer.answer_id) == 32 and answer.answer_id.isalnum()


def test_store_open_migrates_and_pings(store_url: str) -> None:
    with Store.open(store_url) as store:
        assert store.ping()
        assert current_revision(store.db.engine) == head_revision()


# ------------------------------------------------------------------ SQLite specifics (no backend parameter)


def test_default_database_is_one_wal_file_under_ragloop_home(
    ragloop_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGLOOP_DATABASE_URL", raising=False)
    assert default_database_url() == f"sqlite:///{ragloop_home / 'ragloop.db'}"
    with Store.open() as store, store.db.engine.connect() as conn:  # created on first run, directory included
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert (conn.execute(text("PRAGMA busy_timeout")).scalar() or 0) >= 1000
    assert (ragloop_home / "ragloop.db").is_file()


def test_database_url_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGLOOP_DATABASE_URL", "postgresql://postgres@db.example:5432/ragloop")
    assert default_database_url() == "postgresql+psycopg://postgres@db.example:5432/ragloop"
    monkeypatch.setenv("RAGLOOP_DATABASE_URL", f"sqlite:///{tmp_path / 'x.db'}")
    assert default_database_url() == f"sqlite:///{tmp_path / 'x.db'}"
    assert normalize_url("postgres://u:p@h/d") == "postgresql+psycopg://u:p@h/d"


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "mysql://u@h/d"])
def test_unsupported_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        make_engine(url)


def test_store_does_not_import_the_agent_or_service_layers() -> None:
    code = (
        "import sys, ragloop.store, ragloop.store.migrations;"
        "bad = sorted(m for m in sys.modules if m.startswith(('ragloop.agent', 'ragloop.service', 'ragloop.web')));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_public_names_are_exported() -> None:
    import ragloop.store as store

    for name in store.__all__:
        assert hasattr(store, name), name
