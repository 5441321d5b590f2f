"""The auditor on a fast-forwarded clock: nothing before the window; a change that helped its group
is kept; one that did far less than expected is reverted, its kind's evidence threshold raised,
and everything audited with `refers_to` the apply entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop.improve.auditor import Verdict, decide
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediate import PassReport, revert_action, run_pass
from ragloop.improve.remediation import RegistryExpansionBackend
from ragloop.improve.remediation.measure import Delta
from ragloop.improve.scheduler import THRESHOLD_ACTION, Outcome, Policy
from ragloop.retrieval.collection import Collection
from ragloop.store import Store, StoreConflictError
from tests.agent.conftest import DOCS, HASHED
from tests.improve.remediation_support import K1, QUESTION, chunk_of, context, propose_expansion

WINDOW = Policy(audit_window_s=5.0)


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    return sqlite_store


def _pass(store: Store, coll: Collection, clock: ManualClock) -> PassReport:
    return run_pass(store, K1, clock=clock, policy=WINDOW, context=context(store, coll, clock))


def test_a_change_that_helps_its_group_is_kept_after_the_window(store: Store, coll: Collection) -> None:
    clock = ManualClock()
    ferry = chunk_of(coll, "ferry.md")  # not what k=1 serves for the question or its paraphrases
    action = propose_expansion(store, coll, QUESTION, [ferry], confidence=0.8)
    first = _pass(store, coll, clock)
    assert [r.outcome for r in first.scheduled] == [Outcome.APPLIED] and first.audited == []
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.revert_payload is not None
    assert set(row.revert_payload["baseline"]["scores"]) == {0.0}
    clock.advance(4)
    assert _pass(store, coll, clock).audited == []  # the window has not passed
    clock.advance(2)
    [audit] = _pass(store, coll, clock).audited
    assert audit.verdict is Verdict.KEPT and audit.delta is not None
    assert audit.delta.lo > 0 and audit.delta.n >= 3  # the interval, not the point, decided
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.status == "kept" and row.actual_delta is not None
    assert row.actual_delta["verdict"] == "kept" and row.actual_delta["after"] > row.actual_delta["before"]
    entry = store.audit.get(audit.log_id or "")
    assert entry is not None and entry.action_type == "remediation_keep"
    assert entry.refers_to == row.payload["applied_log_id"] and entry.actual_delta == row.actual_delta
    assert [e.chunk_ids for e in RegistryExpansionBackend(coll.registry).entries()] == [(ferry,)]


def test_a_change_far_below_expectation_is_reverted_and_the_threshold_raised(
    store: Store, coll: Collection, tmp_path: Path
) -> None:
    clock = ManualClock()
    ferry = chunk_of(coll, "ferry.md")
    action = propose_expansion(store, coll, QUESTION, [ferry], confidence=0.8)
    _pass(store, coll, clock)
    assert len(RegistryExpansionBackend(coll.registry).entries()) == 1
    # the document is edited and re-ingested: the pinned chunk no longer exists, the entry helps nobody
    (tmp_path / "docs" / "ferry.md").write_text(DOCS["ferry.md"] + " The last ferry was sold in 1891.")
    coll.ingest([tmp_path / "docs"], HASHED)
    clock.advance(6)
    [audit] = _pass(store, coll, clock).audited
    assert audit.verdict is Verdict.REVERTED and audit.delta is not None
    assert audit.expected == 0.4 and audit.delta.hi < 0.5 * 0.4  # 0.5 x confidence x headroom 1
    assert (audit.threshold_before, audit.threshold_after) == (0.5, 0.6)
    assert RegistryExpansionBackend(coll.registry).entries() == []  # undone
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.status == "reverted" and row.reverted_at == clock.now()
    revert = store.audit.get(audit.log_id or "")
    assert revert is not None and revert.action_type == "remediation_revert"
    assert revert.refers_to == row.payload["applied_log_id"] and revert.actual_delta is not None
    [raised] = store.audit.timeline(action_type=THRESHOLD_ACTION)
    assert raised.refers_to == revert.log_id and raised.evidence == {
        "kind": "expansion_cache",
        "before": 0.5,
        "after": 0.6,
        "because": action.action_id,
    }
    # adaptive conservatism, persisted: the next pass asks for stronger evidence
    ferry = chunk_of(coll, "ferry.md")
    weak = propose_expansion(store, coll, "When was the ferry service ended?", [ferry], confidence=0.55)
    strong = propose_expansion(store, coll, "Who ran the Vell ferry?", [ferry], confidence=0.7)
    outcomes = {r.action_id: r.outcome for r in _pass(store, coll, clock).scheduled}
    assert outcomes == {weak.action_id: Outcome.REJECTED, strong.action_id: Outcome.APPLIED}


def test_an_admin_revert_undoes_and_audits(store: Store, coll: Collection) -> None:
    clock = ManualClock()
    action = propose_expansion(store, coll, QUESTION, [chunk_of(coll, "ferry.md")])
    _pass(store, coll, clock)
    settings = coll.settings
    reverted = revert_action(store, action.action_id, actor="admin:k1", settings=settings, config=K1, clock=clock)
    assert reverted.status == "reverted" and RegistryExpansionBackend(coll.registry).entries() == []
    [entry] = store.audit.timeline(action_type="remediation_revert")
    assert entry.actor == "admin:k1" and entry.refers_to == reverted.payload["applied_log_id"]
    assert store.audit.timeline(action_type=THRESHOLD_ACTION) == []
    with pytest.raises(StoreConflictError):
        revert_action(store, action.action_id, settings=settings, config=K1, clock=clock)


@pytest.mark.parametrize(
    ("lo", "hi", "n", "expected", "verdict"),
    [
        (0.2, 0.6, 8, 0.4, Verdict.KEPT),
        (-0.4, -0.1, 8, 0.4, Verdict.REVERTED),  # worse, with confidence
        (-0.1, 0.15, 8, 0.4, Verdict.REVERTED),  # far below expectation
        (-0.1, 0.25, 8, 0.4, Verdict.KEPT),  # cannot tell it apart from half the expectation
        (0.0, 0.0, 2, 0.4, Verdict.INCONCLUSIVE),  # too few questions for an interval
    ],
)
def test_decide_reads_the_interval(lo: float, hi: float, n: int, expected: float, verdict: Verdict) -> None:
    assert decide(Delta(0.0, 0.0, (lo + hi) / 2, lo, hi, n), expected, WINDOW) is verdict
