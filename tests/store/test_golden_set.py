"""Golden-set entries are versioned by insert + deprecate; the database refuses in-place edits."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from ragloop.store import Database, NotFoundError, Store, StoreConflictError


def test_revise_inserts_a_new_version_and_deprecates_the_old(store: Store) -> None:
    v1 = store.golden.add_golden_entry(
        "What is the refund window?",
        "30 days",
        source="human",
        created_by="alice",
        required_chunk_ids=["c1"],
        domain_tags=["billing"],
    )
    other = store.golden.add_golden_entry("Who signs?", "The CFO", source="adversarial", created_by="bob")
    v2 = store.golden.revise_golden_entry(
        v1.entry_id, expected_answer="30 days, except digital goods", created_by="carol"
    )

    assert (v2.version, v2.lineage_id) == (2, v1.entry_id)
    assert v2.question == "What is the refund window?" and v2.required_chunk_ids == ["c1"]
    assert v2.domain_tags == ["billing"] and v2.source == "human" and v2.created_by == "carol"
    old = store.golden.get(v1.entry_id)
    assert old is not None
    assert old.deprecated_at is not None and old.superseded_by == v2.entry_id
    assert old.expected_answer == "30 days"  # the old text is kept, not overwritten

    current = store.golden.current_golden_set()
    assert {e.entry_id for e in current} == {v2.entry_id, other.entry_id}
    assert [e.version for e in store.golden.history(v1.lineage_id)] == [1, 2]


def test_revising_a_deprecated_version_is_a_conflict(store: Store) -> None:
    v1 = store.golden.add_golden_entry("q", "a", source="human", created_by="alice")
    store.golden.revise_golden_entry(v1.entry_id, expected_answer="b", created_by="alice")
    with pytest.raises(StoreConflictError, match="superseded"):
        store.golden.revise_golden_entry(v1.entry_id, expected_answer="c", created_by="alice")
    with pytest.raises(NotFoundError):
        store.golden.revise_golden_entry("0" * 32, expected_answer="c", created_by="alice")


def test_version_number_grows_and_old_sets_can_be_rebuilt(store: Store) -> None:
    assert store.golden.golden_set_version() == 0
    a = store.golden.add_golden_entry("qa", "a", source="human", created_by="x")
    b = store.golden.add_golden_entry("qb", "b", source="human", created_by="x", held_out=True)
    v_before = store.golden.golden_set_version()
    snapshot_time = store.golden.get(b.entry_id).created_at  # type: ignore[union-attr]
    a2 = store.golden.revise_golden_entry(a.entry_id, question="qa (clarified)", created_by="y")
    store.golden.deprecate_golden_entry(b.entry_id)
    assert store.golden.golden_set_version() > v_before
    assert {e.entry_id for e in store.golden.current_golden_set()} == {a2.entry_id}
    assert {e.entry_id for e in store.golden.golden_set_as_of(snapshot_time)} == {a.entry_id, b.entry_id}
    assert store.golden.golden_set_as_of(snapshot_time - timedelta(days=1)) == []
    with pytest.raises(StoreConflictError):
        store.golden.deprecate_golden_entry(b.entry_id)


def test_held_out_and_approval_filters(store: Store) -> None:
    from ragloop.store import utcnow

    store.golden.add_golden_entry("q1", "a", source="human", created_by="x", approved_at=utcnow())
    store.golden.add_golden_entry("q2", "a", source="auto_nominated", created_by="x")
    store.golden.add_golden_entry("q3", "a", source="human", created_by="x", held_out=True, approved_at=utcnow())
    assert {e.question for e in store.golden.current_golden_set(include_held_out=False)} == {"q1", "q2"}
    assert {e.question for e in store.golden.current_golden_set(approved_only=True)} == {"q1", "q3"}


REFUSED = [
    "UPDATE golden_set_entries SET expected_answer = 'edited in place' WHERE entry_id = :id",
    "UPDATE golden_set_entries SET question = 'x', deprecated_at = CURRENT_TIMESTAMP WHERE entry_id = :id",
    "UPDATE golden_set_entries SET version = 7 WHERE entry_id = :id",
    "DELETE FROM golden_set_entries WHERE entry_id = :id",
]


def test_in_place_edits_and_deletes_are_refused_by_the_database(store: Store, db: Database) -> None:
    entry = store.golden.add_golden_entry("q", "a", source="human", created_by="alice")
    for sql in REFUSED:
        with pytest.raises(DBAPIError, match="versioned"), db.engine.begin() as conn:
            conn.execute(text(sql), {"id": entry.entry_id})
    got = store.golden.get(entry.entry_id)
    assert got is not None and (got.question, got.expected_answer, got.version) == ("q", "a", 1)
    assert got.deprecated_at is None


def test_deprecation_is_the_one_allowed_update_and_only_once(store: Store, db: Database) -> None:
    entry = store.golden.add_golden_entry("q", "a", source="human", created_by="alice")
    deprecate = "UPDATE golden_set_entries SET deprecated_at = CURRENT_TIMESTAMP WHERE entry_id = :id"
    with db.engine.begin() as conn:
        conn.execute(text(deprecate), {"id": entry.entry_id})
    with pytest.raises(DBAPIError, match="versioned"), db.engine.begin() as conn:
        conn.execute(
            text("UPDATE golden_set_entries SET deprecated_at = NULL WHERE entry_id = :id"), {"id": entry.entry_id}
        )
    with pytest.raises(DBAPIError, match="versioned"), db.engine.begin() as conn:
        conn.execute(text(deprecate), {"id": entry.entry_id})
    assert store.golden.current_golden_set() == []
