"""Golden-set versions and the review queue, on SQLite and PostgreSQL: every change takes the next
version number, any past version can be rebuilt, writers never collide on a number, the migration
stamps rows written before versions existed, and a candidate becomes an entry only by approval."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from ragloop.experiments.golden_versions import diff_versions
from ragloop.store import Answer, Database, NotFoundError, Store, StoreConflictError, upgrade
from ragloop.store.repositories import GoldenProposal, NewEntry
from ragloop.store.vocabulary import GoldenChange


def _new(q: str, **kw: Any) -> NewEntry:
    return NewEntry(question=q, expected_answer=f"answer to {q}", source=kw.pop("source", "imported"), **kw)


def test_every_change_is_one_version_and_any_version_can_be_rebuilt(store: Store) -> None:
    g = store.golden
    assert g.golden_set_version() == 0 and g.golden_set_at_version(0) == []
    a = g.add_golden_entry("qa", "a", source="human", created_by="alice")
    batch = g.add_golden_entries([_new("qb"), _new("qc", difficulty="hard"), _new("qd")], created_by="import")
    assert g.golden_set_version() == 2 and a.added_in == 1 and {e.added_in for e in batch} == {2}
    a2 = g.revise_golden_entry(a.entry_id, expected_answer="a, clarified", created_by="bob")
    dep = g.deprecate_golden_entry(batch[0].entry_id, actor="carol", note="ambiguous")
    assert (a2.added_in, dep.deprecated_in, g.golden_set_version()) == (3, 4, 4)
    old = g.get(a.entry_id)
    assert old is not None and old.deprecated_in == 3

    def at(v: int) -> set[str]:
        return {e.entry_id for e in g.golden_set_at_version(v)}

    assert at(1) == {a.entry_id}
    assert at(2) == {a.entry_id, *(e.entry_id for e in batch)}
    assert at(3) == {a2.entry_id, *(e.entry_id for e in batch)}
    assert at(4) == {a2.entry_id, batch[1].entry_id, batch[2].entry_id}
    assert at(4) == {e.entry_id for e in g.current_golden_set()}
    for bad in (5, -1):
        with pytest.raises(NotFoundError):
            g.golden_set_at_version(bad)

    log = g.versions()
    assert [(v.version, v.kind, v.actor) for v in log] == [
        (4, GoldenChange.DEPRECATE, "carol"),
        (3, GoldenChange.REVISE, "bob"),
        (2, GoldenChange.IMPORT, "import"),
        (1, GoldenChange.ADD, "alice"),
    ]
    assert log[0].deprecated == [batch[0].entry_id] and log[0].note == "ambiguous"
    assert log[1].added == [a2.entry_id] and log[1].deprecated == [a.entry_id]
    assert sorted(log[2].added) == sorted(e.entry_id for e in batch)

    d = diff_versions(store, 2, 4)
    assert [e.entry_id for e in d.deprecated] == [batch[0].entry_id] and d.added == []
    assert [(c.before.entry_id, c.after.entry_id, c.fields) for c in d.changed] == [
        (a.entry_id, a2.entry_id, ("expected_answer",))
    ]
    assert d.unchanged == 2
    back = diff_versions(store, 4, 1)  # backwards: what 4 has that 1 lacks is "deprecated"
    assert {e.question for e in back.deprecated} == {"qc", "qd"}


def test_the_vocabulary_is_enforced(store: Store) -> None:
    with pytest.raises(ValueError, match="source"):
        store.golden.add_golden_entry("q", "a", source="auto_promoted", created_by="x")
    with pytest.raises(ValueError, match="difficulty"):
        store.golden.add_golden_entry("q", "a", source="human", created_by="x", difficulty="medium")
    assert store.golden.golden_set_version() == 0  # nothing half-written


def test_concurrent_writers_get_distinct_consecutive_versions(store: Store) -> None:
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            for j in range(5):
                store.golden.add_golden_entry(f"q{i}-{j}", "a", source="human", created_by=f"t{i}")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    versions = sorted(e.added_in or 0 for e in store.golden.current_golden_set())
    assert versions == list(range(1, 21))
    assert store.golden.golden_set_version() == 20


def test_deprecation_stamps_are_the_only_update_the_database_allows(store: Store, db: Database) -> None:
    e = store.golden.add_golden_entry("q", "a", source="human", created_by="x")
    with pytest.raises(Exception, match="versioned"), db.engine.begin() as conn:
        conn.execute(text("UPDATE golden_set_entries SET added_in = 9 WHERE entry_id = :id"), {"id": e.entry_id})
    with pytest.raises(Exception, match="versioned"), db.engine.begin() as conn:
        conn.execute(text("UPDATE golden_set_entries SET deprecated_in = 9 WHERE entry_id = :id"), {"id": e.entry_id})
    store.golden.deprecate_golden_entry(e.entry_id)
    got = store.golden.get(e.entry_id)
    assert got is not None and got.added_in == 1 and got.deprecated_in == 2


def test_migration_stamps_rows_written_before_versions(store_url: str) -> None:
    upgrade(store_url, "0004_experiments")
    db = Database.from_url(store_url)
    try:
        insert = (
            "INSERT INTO golden_set_entries (entry_id, lineage_id, version, question, expected_answer, "
            "required_chunk_ids, required_doc_ids, source, difficulty, domain_tags, held_out, created_by, created_at) "
            "VALUES (:id, :lid, :v, :q, 'a', '[]', '[]', 'human', 'standard', '[]', false, 'old', :at)"
        )
        with db.engine.begin() as conn:
            for i, at in enumerate(("2026-01-01 10:00:00", "2026-01-02 10:00:00", "2026-01-03 10:00:00")):
                conn.execute(text(insert), {"id": f"e{i}", "lid": f"e{i}", "v": 1, "q": f"q{i}", "at": at})
            # e0 revised into e3 at one instant (a revision is one change), e1 deprecated later
            conn.execute(
                text(insert), {"id": "e3", "lid": "e0", "v": 2, "q": "q0 revised", "at": "2026-01-04 10:00:00"}
            )
            conn.execute(
                text("UPDATE golden_set_entries SET deprecated_at = :at, superseded_by = 'e3' WHERE entry_id = 'e0'"),
                {"at": "2026-01-04 10:00:00"},
            )
            conn.execute(
                text("UPDATE golden_set_entries SET deprecated_at = :at WHERE entry_id = 'e1'"),
                {"at": "2026-01-05 10:00:00"},
            )
        upgrade(db.engine)
        store = Store(db)
        got = {e: store.golden.get(e) for e in ("e0", "e1", "e2", "e3")}
        stamps = {k: (v.added_in, v.deprecated_in) for k, v in got.items() if v is not None}
        assert stamps == {"e0": (1, 4), "e1": (2, 5), "e2": (3, None), "e3": (4, None)}
        assert store.golden.golden_set_version() == 5
        assert [v.kind for v in store.golden.versions()] == [GoldenChange.BACKFILL] * 5
        assert {e.entry_id for e in store.golden.golden_set_at_version(3)} == {"e0", "e1", "e2"}
        assert {e.entry_id for e in store.golden.golden_set_at_version(5)} == {"e2", "e3"}
        nxt = store.golden.add_golden_entry("new", "a", source="human", created_by="x")
        assert nxt.added_in == 6
    finally:
        db.dispose()


# --------------------------------------------------------------------------- review queue


def _proposal(q: str, **kw: Any) -> GoldenProposal:
    return GoldenProposal(question=q, proposed_answer=kw.pop("answer", f"proposed {q}"), source="auto_nominated", **kw)


def test_a_candidate_enters_only_by_approval_and_only_once(store: Store) -> None:
    store.golden.add_golden_entry("Already golden?", "yes", source="human", created_by="x")
    rows = store.golden_candidates.propose(
        [_proposal("Q1?", evidence={"judge_score": 0.97}), _proposal("  q1?"), _proposal("already  GOLDEN?")]
    )
    assert [r.question for r in rows] == ["Q1?"]  # same question twice, and one already live: skipped
    assert store.golden_candidates.propose([_proposal("Q1?")]) == []  # a repeat run proposes nothing new
    with pytest.raises(ValueError, match="machine sources"):
        store.golden_candidates.propose([GoldenProposal("Q9?", "a", source="human")])
    assert store.golden.golden_set_version() == 1  # proposing changes nothing in the set

    cid = rows[0].candidate_id
    cand, entry = store.golden_candidates.approve(
        cid, reviewer="rev", expected_answer="the reviewer's answer", held_out=False
    )
    assert cand.status == "approved" and cand.answer_edited is True and cand.entry_id == entry.entry_id
    assert entry.expected_answer == "the reviewer's answer" and entry.source == "auto_nominated"
    assert entry.approved_at is not None and entry.created_by == "rev" and entry.added_in == 2
    assert store.golden.versions(limit=1)[0].kind == GoldenChange.APPROVE
    with pytest.raises(StoreConflictError, match="already approved"):
        store.golden_candidates.approve(cid, reviewer="rev2", held_out=False)
    with pytest.raises(StoreConflictError):
        store.golden_candidates.reject(cid, reviewer="rev2")
    with pytest.raises(NotFoundError):
        store.golden_candidates.reject("0" * 32, reviewer="rev")
    assert store.golden.golden_set_version() == 2  # the refused second approval added nothing


def test_approving_a_question_already_in_the_set_is_a_conflict(store: Store) -> None:
    (cand,) = store.golden_candidates.propose([_proposal("Who signs?")])
    store.golden.add_golden_entry("who  signs?", "The CFO", source="human", created_by="alice")  # added meanwhile
    with pytest.raises(StoreConflictError, match="already in the golden set"):
        store.golden_candidates.approve(cand.candidate_id, reviewer="rev", held_out=False)
    assert store.golden_candidates.count() == 1 and len(store.golden.current_golden_set()) == 1
    got = store.golden_candidates.approve(
        cand.candidate_id, reviewer="rev", question="Who signs the budget?", held_out=False
    )
    assert got[1].question == "Who signs the budget?"  # a reworded question is a new entry


def test_reject_and_the_queue_by_status(store: Store) -> None:
    a, _b = store.golden_candidates.propose([_proposal("A?"), _proposal("B?")])
    store.golden_candidates.reject(a.candidate_id, reviewer="rev", note="too vague")
    assert [c.question for c in store.golden_candidates.by_status()] == ["B?"]
    rejected = store.golden_candidates.by_status(status="rejected")
    assert [(c.question, c.review_note) for c in rejected] == [("A?", "too vague")]
    assert store.golden_candidates.count() == 1 and store.golden.current_golden_set() == []


def test_concurrent_approvals_insert_one_entry(store: Store) -> None:
    (cand,) = store.golden_candidates.propose([_proposal("Race?")])
    results: list[str] = []

    def approve(name: str) -> None:
        try:
            store.golden_candidates.approve(cand.candidate_id, reviewer=name, held_out=False)
            results.append("ok")
        except StoreConflictError:
            results.append("conflict")

    threads = [threading.Thread(target=approve, args=(f"r{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["conflict", "conflict", "ok"]
    assert [e.question for e in store.golden.current_golden_set()] == ["Race?"]


def test_nomination_facts_gather_ratings_and_latest_scores(store: Store, make_answer: Callable[..., Answer]) -> None:
    rated, unrated = make_answer(), make_answer()
    for _ in range(3):
        store.feedback.add(rated.answer_id, "positive")
    store.feedback.add(rated.answer_id, "negative")
    store.feedback.add(unrated.answer_id, "positive")
    store.evaluations.add(rated.answer_id, "heuristic", heuristic_score=0.5)
    store.evaluations.add(rated.answer_id, "heuristic", heuristic_score=0.95)
    store.evaluations.add(
        rated.answer_id, "llm_judge", scores={"faithfulness": 1.0}, failure_evidence={"overall": 0.93}
    )
    from ragloop.store import utcnow

    facts = store.golden_candidates.nomination_facts(
        since=rated.created_at.replace(year=2000), until=utcnow().replace(year=2100), min_positive=2
    )
    assert [f.answer_id for f in facts] == [rated.answer_id]
    f = facts[0]
    assert (f.positive, f.negative, f.doc_ids) == (3, 1, ["d1"])
    assert f.heuristic is not None and f.heuristic.heuristic_score == 0.95
    assert f.judge is not None and f.judge.failure_evidence["overall"] == 0.93
