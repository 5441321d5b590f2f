"""The evaluation worker enforces judge qualification (issue 13, evaluator drift): a tier-2 score by
a judge that is not the accepted one (or, before any is accepted, the incumbent) is recorded as
`unqualified` and drives nothing: no recalibration label, no diagnosis candidate, no review intake;
it counts once the judge qualifies. On SQLite and PostgreSQL (the store fixture)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from ragloop.experiments.drift import ACCEPTED, Pin, qualify
from ragloop.experiments.judges import drift_status, judge_standing
from ragloop.improve.evaluate import STANDING_TTL_S, OnlineEvaluator, Outcome
from ragloop.improve.judge import ScorerJudge
from ragloop.improve.payload import EvaluationPayload, PayloadSource
from ragloop.improve.recalibration import LabelSource, collect_labels
from ragloop.improve.routing import RoutingConfig
from ragloop.models.scoring import LexicalScorer
from ragloop.store import Store
from ragloop.store.vocabulary import EvaluationStatus, Tier

pytestmark = pytest.mark.anyio
CONTEXT = "The Zorblat Bridge was completed in 1887 by the river authority."


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class JudgeV2(ScorerJudge):
    """The same scorer under a bumped version: a new judge that must qualify before it counts."""

    version = "2"


def _pin(judge: ScorerJudge) -> Pin:
    return Pin(judge.pin.model, judge.pin.version, judge.pin.prompt_sha)


def _answered(store: Store, i: int) -> str:
    """An answer with a low tier-1 score (so a high judge score disagrees) and a queued tier-2 job."""
    q = f"When was the Zorblat Bridge completed? ({i})"
    aid = store.queries.record_answer(
        session_id=f"s{i}", question=q, answer_text="It was completed in 1887.", pipeline_version="pv"
    ).answer_id
    store.evaluations.add(
        aid, Tier.HEURISTIC, heuristic_score=0.05, scores={"support": 0.1}, evaluator_model="heuristic:test"
    )
    payload = EvaluationPayload(
        question=q, answer="It was completed in 1887.", sources=[PayloadSource(chunk_id="c1", text=CONTEXT)]
    )
    store.queue.enqueue(aid, Tier.LLM_JUDGE, payload.stored())
    return aid


async def _judge_one(ev: OnlineEvaluator, store: Store) -> Outcome:
    job = store.queue.claim("w", tiers=[Tier.LLM_JUDGE])
    assert job is not None
    return await ev.process(job, "w")


def _evaluator(store: Store, judge: ScorerJudge, clock: _Clock) -> OnlineEvaluator:
    return OnlineEvaluator(store, RoutingConfig(tier3_disagreement=0.1), judge=judge, clock=clock)


async def test_an_unqualified_judge_is_recorded_but_counts_for_nothing(store: Store) -> None:
    clock = _Clock()
    old, new = ScorerJudge(LexicalScorer(name="lexical")), JudgeV2(LexicalScorer(name="lexical"))
    first = _answered(store, 1)
    assert await _judge_one(_evaluator(store, old, clock), store) is Outcome.COMPLETED
    counted = store.evaluations.latest(first, Tier.LLM_JUDGE)
    assert counted is not None and counted.status == EvaluationStatus.COMPLETED  # the incumbent (none accepted)
    assert judge_standing(store, _pin(old)).qualified

    second = _answered(store, 2)
    worker_b = _evaluator(store, new, clock)
    assert await _judge_one(worker_b, store) is Outcome.COMPLETED  # the job is done, exactly once
    row = store.evaluations.latest(second, Tier.LLM_JUDGE)
    assert row is not None and row.status == EvaluationStatus.UNQUALIFIED
    assert row.evaluator_version == "JudgeV2/2" and row.faithfulness is not None  # the verdict is kept
    standing = row.failure_evidence["judge_standing"]
    assert not standing["qualified"] and "incumbent" in standing["reason"]
    assert standing["incumbent"] == asdict(_pin(old))
    # ... and drives nothing: no recalibration label, no diagnosis trigger, nobody sent to review
    judged = {lab.answer_id for lab in collect_labels(store) if lab.source == LabelSource.JUDGE}
    assert judged == {first}
    cands = {c.answer_id: c.reasons for c in store.diagnoses.candidates(heuristic_threshold=0.0, judge_threshold=1.1)}
    assert "judged_wrong" in cands[first] and second not in cands
    review = {Tier.HUMAN, Tier.HUMAN_CANDIDATE}  # straight to review (the day's floor) or held as a candidate
    assert review & {j.tier for j in store.queue.for_answer(first)}
    assert not review & {j.tier for j in store.queue.for_answer(second)}
    status = drift_status(store)
    [shown] = status["unqualified_in_use"]
    assert shown["version"] == "JudgeV2/2" and shown["not_counted"] == 1 and "drift qualify" in shown["reason"]

    # the new judge qualifies: after the standing's TTL the same worker's scores count, the old one's do not
    store.audit.record(ACCEPTED, triggered_by="test", evidence={"pin": asdict(_pin(new))})
    third = _answered(store, 3)
    assert await _judge_one(worker_b, store) is Outcome.COMPLETED
    stale = store.evaluations.latest(third, Tier.LLM_JUDGE)
    assert stale is not None and stale.status == EvaluationStatus.UNQUALIFIED  # cached standing, within the TTL
    clock.t += STANDING_TTL_S + 1
    fourth = _answered(store, 4)
    assert await _judge_one(worker_b, store) is Outcome.COMPLETED
    now_counted = store.evaluations.latest(fourth, Tier.LLM_JUDGE)
    assert now_counted is not None and now_counted.status == EvaluationStatus.COMPLETED
    assert not judge_standing(store, _pin(old)).qualified  # replaced: the old judge no longer counts


def test_a_refused_judge_never_counts_even_on_an_empty_store(store: Store) -> None:
    new = _pin(JudgeV2(LexicalScorer(name="lexical")))
    res = qualify(store, new, lambda _a: 1.0, min_labels=1)  # no human labels: refused
    assert not res.accepted
    standing = judge_standing(store, new)
    assert not standing.qualified and "refused" in standing.reason


def test_the_status_is_checked_by_the_database(store: Store) -> None:
    aid = _answered(store, 9)
    store.evaluations.add(aid, Tier.LLM_JUDGE, status=EvaluationStatus.UNQUALIFIED, scores={"faithfulness": 1.0})
    with pytest.raises(ValueError, match="unqualified"):
        store.evaluations.add(aid, Tier.LLM_JUDGE, status="ignored", scores={})
