"""The one clock, and the path from a diagnosis to an applied remediation through the store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ragloop.improve import remediation
from ragloop.improve.clock import Clock, ManualClock, SystemClock, day_start
from ragloop.improve.proposals import Context, spec_for
from ragloop.improve.remediation import (
    REMEDIATIONS,
    ActionSpec,
    RegistryExpansionBackend,
    UnsupportedAction,
    make_remediation,
)
from ragloop.improve.scheduler import Outcome, Scheduler
from ragloop.improve.types import (
    ActionKind,
    Diagnosis,
    EmbeddingEvidence,
    FailureMode,
    MissedChunk,
    ProposedAction,
    Thresholds,
)
from ragloop.retrieval.collection import Collection
from ragloop.store import EvaluationQueue, Store
from tests.agent.conftest import DOCS, make_collection
from tests.improve.remediation_support import QUESTION, chunk_of, context


def test_manual_clock_moves_forward_only() -> None:
    clock = ManualClock(datetime(2026, 3, 1, 23, 59, 59))
    assert clock.now().tzinfo is UTC and clock() == clock.now()
    assert clock.advance(1) == datetime(2026, 3, 2, tzinfo=UTC)
    assert day_start(clock.advance(days=0.5)) == datetime(2026, 3, 2, tzinfo=UTC)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        clock.set(datetime(2026, 3, 1, tzinfo=UTC))
    assert isinstance(clock, Clock) and isinstance(SystemClock(), Clock)
    assert SystemClock().now().tzinfo is not None


def test_the_clock_drives_the_store_queue_too(tmp_path: Path) -> None:
    clock = ManualClock()
    with Store.open(f"sqlite:///{tmp_path / 'q.db'}") as store:
        queue = EvaluationQueue(store.db, clock=clock)
        assert queue.clock() == clock.now()


def test_every_kind_has_a_remediation(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(REMEDIATIONS) == set(ActionKind)
    spec = ActionSpec(action_id="x", kind=ActionKind.PROMPT_CANDIDATE, component="prompt")
    monkeypatch.setattr(remediation, "REMEDIATIONS", {})
    with pytest.raises(UnsupportedAction):
        make_remediation(spec)


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = make_collection("kb", DOCS, tmp_path / "docs")
    yield c
    c.close()


def test_a_diagnosis_becomes_an_applied_expansion_entry(tmp_path: Path, coll: Collection) -> None:
    """Through the diagnosis pass's own proposal (`proposals.spec_for`): its payload is what apply reads."""
    ferry = chunk_of(coll, "ferry.md")
    diagnosis = Diagnosis(
        mode=FailureMode.EMBEDDING_FAILURE,
        confidence=0.8,
        evidence=EmbeddingEvidence(
            missed=(MissedChunk(chunk_id=ferry, oracle_score=0.9, rank=None),), query_distance=0.7
        ),
        actions=(ProposedAction(kind=ActionKind.EXPANSION_CACHE, reason="far", chunk_ids=(ferry,)),),
        rule="oracle-not-retrieved",
        thresholds=Thresholds(),
    )
    where = Context(
        answer_id="a1", question=QUESTION, collection="kb", pipeline_version="pv-x", generation=1, user_reported=True
    )
    spec = spec_for(diagnosis.actions[0], diagnosis, where)
    assert spec is not None
    with Store.open(f"sqlite:///{tmp_path / 'ragloop.db'}") as store:
        kw: dict[str, Any] = {
            "domain": spec.domain,
            "evidence": spec.evidence,
            "payload": spec.payload,
            "priority": spec.priority,
        }
        first = store.improvement_actions.propose(spec.kind, spec.component, spec.dedupe_key, answer_ids=["a1"], **kw)
        again = store.improvement_actions.propose(spec.kind, spec.component, spec.dedupe_key, answer_ids=["a2"], **kw)
        assert first.created and not again.created and again.action.answer_ids == ["a1", "a2"]
        [result] = Scheduler(context(store, coll, ManualClock(), paraphrases=False)).run()
        assert result.outcome is Outcome.APPLIED
        [entry] = store.audit.timeline(action_type="remediation:expansion_cache")
        assert entry.evidence["answer_ids"] == ["a1", "a2"] and entry.evidence["confidence"] == 0.8
        assert entry.expected_delta is not None and entry.expected_delta["value"] > 0
        assert [e.chunk_ids for e in RegistryExpansionBackend(coll.registry).entries()] == [(ferry,)]
