"""The remediation queue (`improvement_actions`), diagnoses and the knowledge-gap log, on both backends."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest

from ragloop.store import (
    Answer,
    Database,
    Diagnoses,
    ImprovementActions,
    KnowledgeGaps,
    NotFoundError,
    Store,
    StoreConflictError,
)
from tests.store.conftest import FakeClock


@pytest.fixture
def actions(db: Database, clock: FakeClock) -> ImprovementActions:
    return ImprovementActions(db, clock=clock)


def test_propose_is_idempotent_and_merges_evidence_while_proposed(actions: ImprovementActions) -> None:
    first = actions.propose("expansion_cache", "expansion_cache", "q1", domain="kb", answer_ids=["a1"], priority=0.4)
    again = actions.propose("expansion_cache", "expansion_cache", "q1", domain="kb", answer_ids=["a2"], priority=0.9)
    assert first.created and not again.created
    assert again.action.action_id == first.action.action_id
    assert again.action.answer_ids == ["a1", "a2"] and again.action.priority == 0.9
    other = actions.propose("expansion_cache", "expansion_cache", "q2", domain="kb")
    assert other.created and other.action.action_id != first.action.action_id
    assert actions.counts()["proposed"] == 2


def test_claim_takes_the_highest_priority_and_serialises_one_component(
    actions: ImprovementActions, clock: FakeClock
) -> None:
    low = actions.propose("rechunk_document", "doc:kb/a.md", "v1", domain="kb", priority=0.2).action
    high = actions.propose("rechunk_document", "doc:kb/a.md", "v2", domain="kb", priority=0.8).action
    elsewhere = actions.propose("expansion_cache", "expansion_cache", "q", domain="kb", priority=0.1).action
    got = actions.claim_next("s1", lease_seconds=60)
    assert got is not None and got.action_id == high.action_id and got.status == "scheduled" and got.attempts == 1
    # the same document has an action in flight: the next claim skips its component
    nxt = actions.claim_next("s2", lease_seconds=60)
    assert nxt is not None and nxt.action_id == elsewhere.action_id
    assert actions.claim_next("s2") is None
    clock.advance(61)  # s1 died: its lease expired, the action is due again (and blocks nothing)
    again = actions.claim_next("s3", lease_seconds=60)
    assert again is not None and again.action_id == high.action_id and again.attempts == 2
    actions.mark_applied(high.action_id, claimer="s3", revert_payload={"generation": 3}, audit_after_s=10)
    then = actions.claim_next("s3")
    assert then is not None and then.action_id == low.action_id


def test_transitions_apply_once_and_audit(actions: ImprovementActions, clock: FakeClock) -> None:
    a = actions.propose("expansion_cache", "expansion_cache", "q", domain="kb", expected_delta={"recall": 0.1}).action
    with pytest.raises(StoreConflictError):
        actions.mark_applied(a.action_id)  # not scheduled
    claimed = actions.claim_next("s")
    assert claimed is not None
    with pytest.raises(StoreConflictError):
        actions.mark_applied(a.action_id, claimer="someone-else")
    applied = actions.mark_applied(a.action_id, claimer="s", revert_payload={"key": "q"}, audit_after_s=30)
    assert applied.status == "applied" and applied.applied_at == clock.now
    with pytest.raises(StoreConflictError):
        actions.mark_applied(a.action_id, claimer="s")  # a second application is refused
    assert actions.due_for_audit() == []
    clock.advance(31)
    assert [x.action_id for x in actions.due_for_audit()] == [a.action_id]
    assert actions.applied_since(clock.now.replace(hour=0), domain="kb") == 1
    kept = actions.mark_kept(a.action_id, actual_delta={"recall": 0.12})
    assert kept.status == "kept" and kept.actual_delta == {"recall": 0.12}
    reverted = actions.mark_reverted(a.action_id, reason="admin")
    assert reverted.status == "reverted" and reverted.reverted_at is not None
    assert actions.propose("expansion_cache", "expansion_cache", "q").action.status == "reverted"  # not re-proposed
    with pytest.raises(NotFoundError):
        actions.mark_kept("0" * 32)


def test_failed_actions_retry_or_stop_and_rejections(actions: ImprovementActions) -> None:
    a = actions.propose("rechunk_document", "doc:kb/x.md", "v", domain="kb").action
    assert actions.claim_next("s") is not None
    retried = actions.mark_failed(a.action_id, "index busy", claimer="s", retry=True)
    assert retried.status == "proposed" and retried.error == "index busy"
    assert actions.claim_next("s") is not None
    assert actions.mark_failed(a.action_id, "broken", claimer="s").status == "failed"
    b = actions.propose("prompt_candidate", "pipeline", "p1").action
    assert actions.reject(b.action_id, "cap reached").status == "rejected"
    listed = actions.listed(status=["failed", "rejected"])
    assert {x.action_id for x in listed} == {a.action_id, b.action_id}
    assert [x.action_id for x in actions.listed(kind="prompt_candidate")] == [b.action_id]
    with pytest.raises(ValueError):
        actions.listed(status="bogus")


def test_racing_claimers_schedule_each_action_once(store_url: str, db: Database) -> None:
    """Eight claimers, twenty actions on twenty components: each claimed exactly once."""
    ImprovementActions(db)
    for i in range(20):
        ImprovementActions(db).propose("expansion_cache", f"c{i}", "k", priority=i / 20)
    claims: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def claimer(name: str) -> None:
        own = Database.from_url(store_url, pool_size=1, max_overflow=0)
        repo = ImprovementActions(own)
        try:
            start.wait()
            while (a := repo.claim_next(name, lease_seconds=300)) is not None:
                with lock:
                    claims.append(a.action_id)
                repo.mark_applied(a.action_id, claimer=name)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            own.dispose()

    threads = [threading.Thread(target=claimer, args=(f"s{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(claims) == 20 and set(Counter(claims).values()) == {1}
    assert ImprovementActions(db).counts()["applied"] == 20


def test_diagnoses_open_complete_fail_and_select(
    store: Store, db: Database, clock: FakeClock, make_answer: Callable[..., Answer]
) -> None:
    diag = Diagnoses(db, clock=clock)
    neg, low, fine, corrected = (make_answer() for _ in range(4))
    store.feedback.add(neg.answer_id, "negative")
    store.feedback.add(corrected.answer_id, "positive", corrected_answer="It was 1887.")
    store.evaluations.add(low.answer_id, "heuristic", heuristic_score=0.2)
    store.evaluations.add(fine.answer_id, "heuristic", heuristic_score=0.9)
    got = {c.answer_id: c.reasons for c in diag.candidates(heuristic_threshold=0.6, judge_threshold=0.5)}
    assert got == {
        neg.answer_id: ("negative_feedback",),
        low.answer_id: ("low_heuristic_score",),
        corrected.answer_id: ("correction",),
    }
    row = diag.open(neg.answer_id, reasons=["negative_feedback"], collection="kb")
    assert diag.open(neg.answer_id, reasons=["correction"]).diagnosis_id == row.diagnosis_id
    assert neg.answer_id not in {c.answer_id for c in diag.candidates(heuristic_threshold=0.6, judge_threshold=0.5)}
    failed = diag.fail(neg.answer_id, "TimeoutError: judge", final=False)
    assert (failed.status, failed.attempts, failed.error) == ("retrying", 1, "TimeoutError: judge")
    done = diag.complete(
        neg.answer_id,
        failure_mode="knowledge_gap",
        confidence=0.9,
        evidence={"kind": "knowledge_gap", "best_score": 0.1},
        actions=[{"kind": "knowledge_gap_log"}],
        rule="oracle-empty",
        diagnosis_input={"question": "q"},
    )
    assert (done.status, done.attempts, done.error, done.diagnosed_at) == ("completed", 2, None, clock.now)
    assert done.reasons == ["negative_feedback", "correction"]
    assert diag.mode_counts() == {"knowledge_gap": 1}
    assert diag.counts()["completed"] == 1
    with pytest.raises(NotFoundError):
        diag.open("f" * 32)


def test_knowledge_gap_groups_count_once_per_answer(db: Database, make_answer: Callable[..., Answer]) -> None:
    gaps = KnowledgeGaps(db)
    a1, a2 = make_answer(), make_answer()
    with gaps.exclusive("kb"):
        g = gaps.add(
            "kb",
            "What is the boiling point of liquid nitrogen?",
            answer_id=a1.answer_id,
            ideal_answer="-196 C",
            vector=[1.0, 0.0],
            embedder="hashed",
            generated_questions=["At what temperature does liquid nitrogen boil?"],
            generated_by="template",
            best_chunk_id="c1",
            best_score=0.1,
        )
    gaps.add_occurrence(
        g.gap_id,
        "Liquid nitrogen boiling point?",
        answer_id=a2.answer_id,
        ideal_answer="77 K",
        best_chunk_id="c2",
        best_score=0.2,
    )
    again = gaps.add_occurrence(g.gap_id, "Liquid nitrogen boiling point?", answer_id=a2.answer_id, ideal_answer=None)
    assert again.count == 2 and again.best_chunk_id == "c2" and again.ideal_answers == ["-196 C", "77 K"]
    assert [x.gap_id for x in gaps.listed(collection="kb")] == [g.gap_id]
    assert gaps.for_answer(a2.answer_id) is not None and gaps.count() == 1
    gaps.set_status(g.gap_id, "addressed")
    assert gaps.listed() == [] and gaps.count(status=None) == 1


def test_a_skipped_diagnosis_is_selected_again_once_corrected(
    store: Store, db: Database, make_answer: Callable[..., Answer]
) -> None:
    diag = Diagnoses(db)
    a = make_answer()
    store.feedback.add(a.answer_id, "negative")
    skipped = diag.skip(a.answer_id, "no ideal answer", reasons=["negative_feedback"])
    assert skipped.status == "skipped" and skipped.error == "no ideal answer"
    assert diag.candidates(heuristic_threshold=0.6, judge_threshold=0.5) == []
    store.feedback.add(a.answer_id, "negative", corrected_answer="It opened in 1887.")
    [again] = diag.candidates(heuristic_threshold=0.6, judge_threshold=0.5)
    assert again.answer_id == a.answer_id and "correction" in again.reasons
    reopened = diag.open(
        a.answer_id, reasons=again.reasons, ideal_answer="It opened in 1887.", ideal_source="correction"
    )
    assert (reopened.status, reopened.ideal_answer, reopened.error) == ("pending", "It opened in 1887.", None)
    assert diag.skip(a.answer_id, "again").status == "pending"  # a selected diagnosis is not skipped back
