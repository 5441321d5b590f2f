"""Queries, answers, evaluations, feedback, model calls, experiments, regression runs, transactions."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from ragloop.calls import CallRecord, user_prompt
from ragloop.store import (
    Answer,
    Database,
    EvaluationJob,
    ModelCall,
    NotFoundError,
    Query,
    Store,
    StoreConflictError,
    question_hash,
)


def test_record_answer_writes_the_query_and_the_answer(store: Store) -> None:
    answer = store.queries.record_answer(
        session_id="sess-1",
        question="  What is the   refund window? ",
        answer_text="Thirty days [1].",
        pipeline_version="pv-abc",
        citations=[{"chunk_id": "c1", "doc_id": "d1", "title": "Policy", "excerpt": "30 days", "score": 0.93}],
        confidence=0.91,
        termination_reason="converged",
        residual_deficiencies=["none"],
        trace={"nodes": ["retrieve", "generate"]},
        latency_ms=1240,
        retrieved_chunk_ids=["c1", "c2"],
        retrieval_scores=[0.93, 0.41],
        user_id="key-1",
    )
    assert answer.citation_count == 1 and answer.refused is False and answer.confidence == 0.91
    query = store.queries.query_for_answer(answer.answer_id)
    assert query is not None and query.query_id == answer.query_id and query.answer_id == answer.answer_id
    assert query.question_hash == question_hash("what is the refund window?")
    assert query.retrieval_scores == [0.93, 0.41] and query.pipeline_version == "pv-abc"
    assert store.queries.get_query(query.query_id) is not None
    assert store.queries.get_answer("0" * 32) is None


def test_sessions_list_read_and_delete_with_cascades(store: Store, make_answer: Callable[..., Answer]) -> None:
    a1 = make_answer("s1")
    a2 = make_answer("s1")
    b1 = make_answer("s2")
    store.evaluations.add(a1.answer_id, "heuristic", heuristic_score=0.7)
    store.feedback.add(a1.answer_id, "negative", issues=["wrong_answer"])
    store.queue.enqueue(a1.answer_id, "heuristic")
    store.model_calls.record(
        CallRecord(model="test:echo", purpose="generate", prompt=user_prompt("hi"), answer_id=a1.answer_id)
    )

    sessions = store.queries.list_sessions()
    assert {(s.session_id, s.turns) for s in sessions} == {("s1", 2), ("s2", 1)}
    assert all(s.first_at.tzinfo is not None and s.first_at <= s.last_at for s in sessions)
    assert [a.answer_id for a in store.queries.session_answers("s1")] == [a1.answer_id, a2.answer_id]

    assert store.queries.delete_session("s1") == 2
    assert store.queries.session_answers("s1") == []
    assert store.queries.get_answer(a1.answer_id) is None
    assert store.evaluations.for_answer(a1.answer_id) == [] and store.feedback.for_answer(a1.answer_id) == []
    assert store.queue.for_answer(a1.answer_id) == []
    [call] = store.model_calls.usage()
    assert call.calls == 1  # model calls outlive the conversation, detached from it
    with store.db.transaction(write=False) as s:
        assert s.scalar(select(ModelCall.answer_id)) is None
        assert s.scalar(select(func.count()).select_from(EvaluationJob)) == 0
    assert store.queries.get_answer(b1.answer_id) is not None


def test_evaluations(store: Store, make_answer: Callable[..., Answer]) -> None:
    a = make_answer()
    store.evaluations.add(a.answer_id, "heuristic", heuristic_score=0.55, scores={"citation_coverage": 0.5})
    judged = store.evaluations.add(
        a.answer_id,
        "llm_judge",
        scores={"faithfulness": 0.94, "answer_relevance": 0.87, "context_precision": 0.72, "context_recall": 0.65},
        failure_mode="ranking_failure",
        failure_evidence={"missed_chunk_ids": ["c9"], "ranks": {"c9": 7}},
        oracle_chunk_ids=["c9"],
        improvement_actions=[{"action": "re_embed_query", "priority": "high"}],
        evaluator_model="qwen2.5-1.5b",
    )
    failed = store.evaluations.add(a.answer_id, "llm_judge", status="failed", error="judge timed out 3 times")
    assert (judged.faithfulness, judged.context_recall) == (0.94, 0.65)
    assert [e.evaluation_tier for e in store.evaluations.for_answer(a.answer_id)] == [
        "heuristic",
        "llm_judge",
        "llm_judge",
    ]
    latest = store.evaluations.latest(a.answer_id, "llm_judge")
    assert latest is not None and latest.eval_id in (judged.eval_id, failed.eval_id)
    assert [e.eval_id for e in store.evaluations.recent(failure_mode="ranking_failure")] == [judged.eval_id]
    with pytest.raises(ValueError):
        store.evaluations.add(a.answer_id, "vibes")
    with pytest.raises(NotFoundError):
        store.evaluations.add("0" * 32, "heuristic")


def test_feedback_is_weighted(store: Store, make_answer: Callable[..., Answer]) -> None:
    a = make_answer()
    plain = store.feedback.add(a.answer_id, "positive")
    detailed = store.feedback.add(
        a.answer_id,
        "negative",
        issues=["wrong_answer", "missing_context"],
        corrected_answer="Thirty days, not sixty.",
        relevant_doc_ids=["doc_001"],
        highlighted_passages=[{"start": 0, "end": 10, "text": "sixty days"}],
        user_id="key-1",
    )
    assert plain.weight > 1.0  # explicit feedback outweighs one automatic score
    assert detailed.weight > plain.weight
    assert detailed.highlighted_passages == [{"start": 0, "end": 10, "text": "sixty days"}]
    assert [f.rating for f in store.feedback.recent(rating="negative")] == ["negative"]
    with pytest.raises(ValueError):
        store.feedback.add(a.answer_id, "meh")
    with pytest.raises(NotFoundError):
        store.feedback.add("0" * 32, "positive")


def test_model_calls_and_usage(store: Store, make_answer: Callable[..., Answer]) -> None:
    a = make_answer()
    store.model_calls.record(CallRecord(
        model="qwen", purpose="generate", prompt=user_prompt("q"), response="a",
        prompt_tokens=100, completion_tokens=20, latency_ms=12.5, cost_usd=0.001, answer_id=a.answer_id,
    ))  # fmt: skip
    store.model_calls.record(
        CallRecord(
            model="qwen", purpose="judge", prompt=user_prompt("p"), prompt_tokens=50, error="timeout", run_id="r1"
        )
    )
    store.model_calls.record(CallRecord(model="other", purpose="judge", prompt=user_prompt("p"), prompt_tokens=5))
    assert [c.purpose for c in store.model_calls.for_answer(a.answer_id)] == ["generate"]
    usage = {u.model: u for u in store.model_calls.usage()}
    assert (usage["qwen"].calls, usage["qwen"].prompt_tokens, usage["qwen"].completion_tokens) == (2, 150, 20)
    assert usage["qwen"].errors == 1 and usage["qwen"].cost_usd == pytest.approx(0.001)
    assert usage["other"].cost_usd == 0.0
    assert usage["qwen"].purpose is None and usage["qwen"].model_s == pytest.approx(0.0125)
    store.model_calls.record(CallRecord(
        model="qwen", purpose="judge", prompt=user_prompt("p"), prompt_tokens=50, latency_ms=900.0, cached=True,
    ))  # fmt: skip
    split = {(u.model, u.purpose): u for u in store.model_calls.usage(by="purpose")}
    assert set(split) == {("qwen", "generate"), ("qwen", "judge"), ("other", "judge")}
    judge = split["qwen", "judge"]
    assert (judge.calls, judge.cached, judge.prompt_tokens, judge.errors) == (2, 1, 50, 1)
    assert judge.model_s == 0.0  # a cache hit's replayed latency is not time the model spent
    assert split["qwen", "generate"].model_s == pytest.approx(0.0125)


def test_experiments(store: Store) -> None:
    e = store.experiments.create(
        "hybrid_retrieval_vs_dense_only",
        control_config={"retrieval_strategy": "dense", "top_k": 5},
        treatment_config={"retrieval_strategy": "hybrid_rrf", "top_k": 7},
        primary_metric="context_recall",
        guardrail_metrics=["faithfulness", "latency_p99"],
    )
    assert (e.status, e.traffic_split, e.min_sample_size) == ("running", 0.05, 500)
    updated = store.experiments.record_results(
        e.experiment_id,
        status="significant",
        p_value=0.031,
        control_sample=9450,
        treatment_sample=498,
        recommendation="promote_treatment",
        results={"control": {"context_recall": 0.65}, "treatment": {"context_recall": 0.73}},
    )
    assert updated.p_value == 0.031 and updated.results["treatment"]["context_recall"] == 0.73
    assert store.experiments.mark_promoted(e.experiment_id).promoted_at is not None
    assert [x.experiment_id for x in store.experiments.list_experiments(status="promoted")] == [e.experiment_id]
    with pytest.raises(ValueError):
        store.experiments.create("bad", control_config={}, treatment_config={}, primary_metric="m", traffic_split=1.5)


def test_regression_runs(store: Store) -> None:
    run = store.regressions.start(golden_set_version=4, pipeline_version="pv-a", baseline={"faithfulness": 0.93})
    assert run.run_status == "running" and run.baseline_faithfulness == 0.93
    assert store.regressions.latest() is None
    done = store.regressions.finish(
        run.run_id,
        metrics={"faithfulness": 0.90, "context_recall": 0.7, "latency_p99": 2.1},
        regression_detected=True,
        rollback_triggered=True,
    )
    assert (done.faithfulness_mean, done.context_recall_mean, done.answer_relevance_mean) == (0.90, 0.7, None)
    assert done.completed_at is not None and done.metrics["latency_p99"] == 2.1
    latest = store.regressions.latest(pipeline_version="pv-a")
    assert latest is not None and latest.run_id == run.run_id
    with pytest.raises(StoreConflictError):
        store.regressions.finish(run.run_id, metrics={}, regression_detected=False)


def test_a_failing_transaction_rolls_back_every_repository_call_in_it(
    store: Store, db: Database, make_answer: Callable[..., Answer]
) -> None:
    a = make_answer()
    with pytest.raises(RuntimeError, match="boom"), db.transaction():
        store.evaluations.add(a.answer_id, "heuristic", heuristic_score=0.2)
        store.feedback.add(a.answer_id, "negative")
        store.queries.record_answer(session_id="s9", question="q", answer_text="x", pipeline_version="pv")
        raise RuntimeError("boom")
    assert store.evaluations.for_answer(a.answer_id) == [] and store.feedback.for_answer(a.answer_id) == []
    with db.transaction(write=False) as s:
        assert s.scalar(select(func.count()).select_from(Query).where(Query.session_id == "s9")) == 0


def test_nested_calls_join_the_transaction_but_other_threads_do_not(
    store: Store, db: Database, make_answer: Callable[..., Answer]
) -> None:
    a = make_answer()
    seen_elsewhere: list[int] = []
    with db.transaction() as outer:
        store.feedback.add(a.answer_id, "positive")
        assert len(store.feedback.for_answer(a.answer_id)) == 1  # joined: sees its own uncommitted row
        t = threading.Thread(target=lambda: seen_elsewhere.append(len(store.feedback.for_answer(a.answer_id))))
        t.start()
        t.join(30)
        assert outer.in_transaction()
    assert seen_elsewhere == [0]  # its own transaction: the uncommitted row is invisible
    assert len(store.feedback.for_answer(a.answer_id)) == 1
