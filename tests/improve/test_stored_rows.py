"""Answers stored by the previous version (before the typed answer) are still read from the store:
diagnosis loads them, the threshold refit reads their gate score, the API shows their trace.

The rows are real: `tests/agent/data/stored_rows_v0.json` was written by main's recorder code
before the typed models existed. Runs on SQLite and PostgreSQL (the `store` fixture).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragloop.agent.details import GradeDetail, OtherDetail
from ragloop.improve.payload import EvaluationPayload, StoredTrace, answer_payload
from ragloop.improve.remediation.thresholds import first_gate_score
from ragloop.improve.served import load_served
from ragloop.store import Store
from ragloop.store.vocabulary import Tier

ROWS = json.loads((Path(__file__).parents[1] / "agent" / "data" / "stored_rows_v0.json").read_text())["rows"]


def _store_old_row(store: Store, row: dict[str, Any]) -> str:
    p = row["payload"]
    ans = store.queries.record_answer(
        session_id="k:s",
        question=row["question"],
        answer_text=p["answer"],
        pipeline_version=p["pipeline_version"] or "pv-old",
        citations=p["citations"],
        refused=p["refused"],
        termination_reason=p["termination_reason"],
        trace=row["trace"],
        retrieved_chunk_ids=[r["chunk_id"] for r in p["retrieved"]],
        retrieval_scores=p["retrieval_scores"],
    )
    store.queue.enqueue(ans.answer_id, Tier.HEURISTIC, p)
    return ans.answer_id


def served_contexts(store: Store, answer_id: str) -> tuple[str, ...]:
    served = load_served(store, answer_id)
    assert served is not None
    return served.contexts


@pytest.mark.parametrize("row", ROWS, ids=["answered", "refused"])
def test_an_old_row_is_read_back_through_the_typed_forms(store: Store, row: dict[str, Any]) -> None:
    answer_id = _store_old_row(store, row)
    p = row["payload"]

    payload = answer_payload(store, answer_id)
    assert payload is not None and payload.answer == p["answer"] and payload.refused == p["refused"]
    expected = [s["text"] for s in p["sources"]] or [r["text"] for r in p["retrieved"]]
    assert payload.tier1_input().contexts == expected and served_contexts(store, answer_id) == tuple(expected)
    assert payload.tier1_input().retrieval_scores == p["retrieval_scores"]

    served = load_served(store, answer_id)
    assert served is not None
    assert (served.question, served.answer, served.refused) == (row["question"], p["answer"], p["refused"])
    assert [c.chunk_id for c in served.served] == [r["chunk_id"] for r in p["retrieved"]]
    assert [c.rank for c in served.served] == list(range(1, len(p["retrieved"]) + 1))
    first_retrieve = next(r for r in row["trace"]["records"] if r["node"] == "retrieve")
    assert served.query == first_retrieve["detail"]["queries"][0]

    stored = store.queries.get_answer(answer_id)
    assert stored is not None
    first_grade = next(r for r in row["trace"]["records"] if r["node"] == "grade")
    assert first_gate_score(stored.trace) == max(first_grade["detail"]["scores"].values())
    trace = StoredTrace.load(stored.trace)
    assert [r.node for r in trace.records] == row["nodes"]
    assert not any(isinstance(r.detail, OtherDetail) for r in trace.records)
    assert trace.trace.details(GradeDetail)[0].scores == first_grade["detail"]["scores"]


def test_a_judge_job_queued_by_feedback_reads_the_tier1_payload(store: Store) -> None:
    answer_id = _store_old_row(store, ROWS[0])
    feedback_only = EvaluationPayload.load({"reasons": ["negative_feedback"]})
    assert not feedback_only.carries_answer
    assert answer_payload(store, answer_id) == EvaluationPayload.load(ROWS[0]["payload"])
    assert answer_payload(store, "no-such-answer") is None
