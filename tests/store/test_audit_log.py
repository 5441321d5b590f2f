"""The improvement audit log is insert-only in the database itself, not just in the repository."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from ragloop.store import Database, ImprovementAuditLog, Store


def _entry(store: Store) -> ImprovementAuditLog:
    return store.audit.record(
        "re_chunk",
        triggered_by="chunking_failure",
        evidence={"doc_id": "d1", "split_boundary": 512},
        pipeline_version_before="pv-a",
        pipeline_version_after="pv-b",
        expected_delta={"context_recall": 0.03},
    )


def test_record_and_read_back(store: Store) -> None:
    entry = _entry(store)
    got = store.audit.get(entry.log_id)
    assert got is not None
    assert got.evidence == {"doc_id": "d1", "split_boundary": 512}
    assert got.expected_delta == {"context_recall": 0.03}
    assert got.actual_delta is None
    assert got.created_at.tzinfo is not None
    assert [e.log_id for e in store.audit.timeline()] == [entry.log_id]


def test_a_later_measurement_is_a_new_row_that_refers_to_the_change(store: Store) -> None:
    change = _entry(store)
    measured = store.audit.record(
        "measure",
        triggered_by="remediation_auditor",
        evidence={"queries": 812},
        refers_to=change.log_id,
        actual_delta={"context_recall": 0.021},
    )
    assert [m.log_id for m in store.audit.measurements(change.log_id)] == [measured.log_id]
    assert store.audit.get(change.log_id).actual_delta is None  # type: ignore[union-attr]
    assert {e.action_type for e in store.audit.timeline(action_type="measure")} == {"measure"}


REFUSED = [
    "UPDATE improvement_audit_log SET actor = 'mallory'",
    "UPDATE improvement_audit_log SET actual_delta = NULL WHERE log_id = :log_id",
    "DELETE FROM improvement_audit_log WHERE log_id = :log_id",
    "DELETE FROM improvement_audit_log",
]


def test_raw_update_and_delete_are_refused_by_the_database(store: Store, db: Database) -> None:
    entry = _entry(store)
    for sql in REFUSED:
        with pytest.raises(DBAPIError, match="insert-only"), db.engine.begin() as conn:
            conn.execute(text(sql), {"log_id": entry.log_id} if ":log_id" in sql else {})
    got = store.audit.get(entry.log_id)
    assert got is not None and got.actor == "system" and got.expected_delta == {"context_recall": 0.03}
    assert len(store.audit.timeline()) == 1


def test_orm_updates_are_refused_too(store: Store, db: Database) -> None:
    entry = _entry(store)
    with pytest.raises(DBAPIError, match="insert-only"), db.transaction() as s:
        row = s.get(ImprovementAuditLog, entry.log_id)
        assert row is not None
        row.triggered_by = "rewritten history"
        s.flush()
    assert store.audit.get(entry.log_id).triggered_by == "chunking_failure"  # type: ignore[union-attr]


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
def test_truncate_is_refused_on_postgres(store: Store, db: Database) -> None:
    assert db.dialect == "postgresql"  # SQLite has no TRUNCATE
    _entry(store)
    store.golden.add_golden_entry("q", "a", source="human", created_by="alice")
    for table in ("improvement_audit_log", "golden_set_entries"):
        with pytest.raises(DBAPIError, match="insert-only"), db.engine.begin() as conn:
            # CASCADE: golden_candidates references golden_set_entries, and a plain TRUNCATE would stop
            # at that foreign key before the trigger; with CASCADE only the trigger can refuse it
            conn.execute(text(f"TRUNCATE {table} CASCADE"))
    assert len(store.audit.timeline()) == 1 and len(store.golden.current_golden_set()) == 1
