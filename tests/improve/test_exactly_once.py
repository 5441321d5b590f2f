"""Two workers never apply one remediation twice: racing claims on PostgreSQL (and SQLite), and two
schedulers with their own connections running the same pass at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragloop.improve.claims import claim_action
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediation import ActionSpec, AppliedChange, ExpansionCacheAction, RemediationContext
from ragloop.improve.scheduler import Outcome, Policy, Scheduler, conflict_key
from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from tests.agent.conftest import DOCS, make_collection
from tests.improve.remediation_support import QUESTION, chunk_of, context, postgres_schema_url, propose_expansion


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ragloop.db'}"
        return
    with postgres_schema_url() as url:
        yield url


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = make_collection("kb", DOCS, tmp_path / "docs")
    yield c
    c.close()


def test_racing_claims_take_one_action_once(store_url: str, coll: Collection) -> None:
    stores = [Store.open(store_url) for _ in range(6)]
    try:
        action = propose_expansion(stores[0], coll, QUESTION, [chunk_of(coll, "ferry.md")])
        now = ManualClock().now()
        barrier = threading.Barrier(len(stores))
        won: list[str] = []

        def claim(i: int) -> None:
            barrier.wait()
            if claim_action(stores[i], action.action_id, f"w{i}", now, 600.0, conflict_key):
                won.append(f"w{i}")

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(stores))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        row = stores[0].improvement_actions.get(action.action_id)
        assert len(won) == 1 and row is not None and row.claimed_by == won[0] and row.attempts == 1
    finally:
        for s in stores:
            s.close()


def test_two_schedulers_apply_one_action_once(
    store_url: str, coll: Collection, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = [Store.open(store_url) for _ in range(2)]
    calls: list[str] = []
    real_apply, real_due = ExpansionCacheAction.apply, Scheduler.due
    barrier = threading.Barrier(2)

    def due_then_wait(self: Scheduler) -> list[ActionSpec]:
        due = real_due(self)
        barrier.wait(30)  # both saw the action as due before either claims it
        return due

    def counted_apply(self: ExpansionCacheAction, ctx: RemediationContext) -> AppliedChange:
        calls.append(self.spec.action_id)
        return real_apply(self, ctx)

    monkeypatch.setattr(Scheduler, "due", due_then_wait)
    monkeypatch.setattr(ExpansionCacheAction, "apply", counted_apply)
    try:
        action = propose_expansion(stores[0], coll, QUESTION, [chunk_of(coll, "ferry.md")])
        clock = ManualClock()
        results: dict[int, list[Outcome]] = {}

        def run(i: int) -> None:
            sched = Scheduler(context(stores[i], coll, clock, paraphrases=False), Policy(), worker=f"w{i}")
            results[i] = [r.outcome for r in sched.run()]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(results.values()) == [[Outcome.APPLIED], [Outcome.CLAIMED_ELSEWHERE]]
        assert calls == [action.action_id]
        assert len(stores[0].audit.timeline(action_type="remediation:expansion_cache")) == 1
        row = stores[0].improvement_actions.get(action.action_id)
        assert row is not None and row.status == "applied" and row.attempts == 1
    finally:
        for s in stores:
            s.close()
