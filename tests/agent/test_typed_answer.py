"""The typed answer is the one contract every consumer reads.

- a real graph run, serialised to its stored forms (the answer as JSON, the evaluation payload,
  the answers table's trace column, the harness's result record as a JSON line) and loaded back,
  gives the same harness metrics and the same payload as the live object;
- rows written by the previous version (`data/stored_rows_v0.json`: made by main's recorder
  before these models existed) still load, keep their values, and feed diagnosis and metrics;
- a node that records a detail key its typed model does not define fails the turn at once;
- no code under `ragloop/` reads trace details or the graph state by string key.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ragloop.agent.answer import Answer
from ragloop.agent.details import (
    DETAILS,
    OtherDetail,
    RefineDetail,
    RetrieveDetail,
    RewriteDetail,
    UnknownDetailKeyError,
    parse_detail,
)
from ragloop.agent.graph import NODES, _bind
from ragloop.agent.runtime import NodeResult
from ragloop.agent.trace import Trace
from ragloop.agent.types import TraceRecord
from ragloop.evaluation.metrics.agent import agent_metrics, retrieval_metrics
from ragloop.evaluation.metrics.ops import ops_metrics, ops_values
from ragloop.evaluation.records import AnswerPart, Budgets, ResultRecord, agent_record
from ragloop.improve.payload import EvaluationPayload, StoredTrace
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import build_agent, cfg, fixed

OLD_ROWS = json.loads((Path(__file__).parent / "data" / "stored_rows_v0.json").read_text())["rows"]
REPO = Path(__file__).resolve().parents[2]

RUNNER_KEYS_V0 = {
    "mode", "standalone", "answer", "refused", "termination_reason", "verdict", "quality_score",
    "residual_deficiencies", "citations", "chunks", "kept", "deficiencies", "cycles", "trace", "latency_ms", "budgets",
}  # fmt: skip
"""The answer part of a result record as main's runner wrote it before the typed answer."""

ANSWERED = ("When was the Zorblat Bridge completed?", {"gold_docs": ["bridge.md"], "kind": "answerable"})
UNANSWERABLE = ("Who won the 1950 chess olympiad in Ostria?", {"should_refuse": True, "kind": "unanswerable"})


def _metrics(rec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "agent": agent_metrics(rec),
        "retrieval": retrieval_metrics(rec),
        "ops": ops_metrics(rec),
        "ops_values": ops_values(rec),
    }


@pytest.mark.parametrize(("case", "grade"), [(ANSWERED, 0.9), (UNANSWERABLE, 0.05)], ids=["answered", "refused"])
def test_stored_forms_give_the_live_metrics_and_payload(
    coll: Collection, case: tuple[str, dict[str, Any]], grade: float
) -> None:
    question, gold = case
    config = cfg(critique=True)
    live = build_agent(coll, config, grade=fixed(grade)).answer(question)
    # the stored answer (JSON) loads back equal, field by field
    loaded = Answer.model_validate_json(live.model_dump_json())
    assert loaded.model_dump() == live.model_dump()  # (== would compare the private graph state too)
    assert loaded.hits and all(h.rank >= 1 and h.stage_scores for h in loaded.hits if h.source == "internal")

    live_rec = agent_record(live, "", config) | gold
    stored_rec = json.loads(json.dumps(agent_record(loaded, "", config) | gold))  # a run's JSON line
    live_m, stored_m = _metrics(live_rec), _metrics(stored_rec)
    assert stored_m == live_m
    # and the metrics are not vacuous: the grader and verdict were scored on this item
    assert live_m["agent"]["grader_set_accuracy"][1] >= 1
    assert live_m["agent"]["steps"][0] == len(live.trace.records) >= 4
    if not gold.get("should_refuse"):
        assert live_m["retrieval"]["first_recall@k"] == (1.0, 1.0)
        assert live_m["agent"]["false_refusal"] == (0.0, 1.0)
        assert live_m["agent"]["critique_cycles"][0] >= 1
    else:
        assert live_m["agent"]["correct_refusal"] == (1.0, 1.0)
        assert live_m["agent"]["rewrites"][0] >= 1

    # the run file's shape is the one earlier runs wrote (their reports still read them)
    assert set(live_rec) - set(gold) == RUNNER_KEYS_V0
    assert set(live_rec["chunks"][next(iter(live_rec["chunks"]))]) == {
        "doc_id", "passage", "grade", "score", "source", "excerpt"
    }  # fmt: skip
    assert (
        ResultRecord.load(stored_rec).model_dump(include=set(AnswerPart.model_fields))
        == AnswerPart.model_validate(stored_rec).model_dump()
    )

    payload = EvaluationPayload.from_answer(question, live)
    assert EvaluationPayload.load(json.loads(json.dumps(payload.stored()))) == payload
    assert (
        payload.retrieved and [r.chunk_id for r in payload.retrieved] == [c.chunk_id for c in live.internal_hits()][:10]
    )
    stored_trace = StoredTrace.load(json.loads(json.dumps(StoredTrace.of(live, degraded=False).stored())))
    assert stored_trace.records == live.trace.records
    assert stored_trace.summary == live.trace.summarize()


def test_the_answer_is_frozen(coll: Collection) -> None:
    ans = build_agent(coll).answer(ANSWERED[0])
    with pytest.raises(ValidationError):
        ans.answer = "something else"  # type: ignore[misc]
    moved = ans.with_version("pv-other")
    assert moved.pipeline_version == "pv-other" and ans.pipeline_version != "pv-other"
    assert moved.graph_state is ans.graph_state


def _project(new: Any, old: Any) -> Any:
    """`new` cut down to the keys `old` has (the new version may add keys, never drop or change them)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {k: _project(new.get(k), v) for k, v in old.items()}
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_project(n, o) for n, o in zip(new, old, strict=True)]
    return new


@pytest.mark.parametrize("row", OLD_ROWS, ids=[r["question"][:20] for r in OLD_ROWS])
def test_rows_stored_by_the_previous_version_still_load(row: dict[str, Any]) -> None:
    trace = StoredTrace.load(row["trace"])
    assert [r.node for r in trace.records] == row["nodes"]
    assert not any(isinstance(r.detail, OtherDetail) for r in trace.records)  # every record fits its model
    # the stored shape is kept: re-serialised, every old key holds its old value
    assert _project(trace.stored(), row["trace"]) == row["trace"]
    raw_first = next(r for r in row["trace"]["records"] if r["node"] == "grade")
    assert trace.first_gate_score() == max(raw_first["detail"]["scores"].values())
    raw_retrieve = next(r for r in row["trace"]["records"] if r["node"] == "retrieve")
    assert trace.first_query() == raw_retrieve["detail"]["queries"][0]

    payload = EvaluationPayload.load(row["payload"])
    assert _project(payload.stored(), row["payload"]) == row["payload"]
    assert payload.carries_answer and payload.answer == row["payload"]["answer"]
    assert payload.contexts() == (
        [s["text"] for s in row["payload"]["sources"]] or [r["text"] for r in row["payload"]["retrieved"]]
    )
    assert [h.rank for h in payload.retrieved] == [0] * len(payload.retrieved)  # not stored then

    # the harness reads an old run's record through the same typed trace
    rec = {"trace": row["trace"]["records"], "refused": row["payload"]["refused"], "should_refuse": True}
    m = agent_metrics(rec)
    raw = row["trace"]["records"]
    assert m["steps"] == (len(raw), 1.0)
    assert m["rewrites"] == (sum(r["node"] == "rewrite" for r in raw), 1.0)
    assert m["grader_set_accuracy"][1] == sum(r["node"] == "grade" for r in raw)


def test_loading_is_tolerant_and_recording_is_strict() -> None:
    odd = Trace.from_json(
        [
            {"node": "retrieve", "decision": "x", "detail": {"chunk_ids": ["a"], "from_the_future": 1}},
            {"node": "refine", "decision": "x", "detail": {"kept": "not a list"}},
            {"node": "renamed_node", "detail": {"k": 1}},
            "not a record",
        ]
    )
    retrieve, refine, renamed = odd.records
    assert isinstance(retrieve.detail, RetrieveDetail) and retrieve.detail.chunk_ids == ["a"]
    assert isinstance(refine.detail, OtherDetail) and refine.detail.model_dump() == {"kept": "not a list"}
    assert isinstance(renamed.detail, OtherDetail) and renamed.decision == ""
    assert StoredTrace.load({"records": [], "summary": {"steps": "many"}}).summary is None
    assert not EvaluationPayload.load({"reasons": ["negative_feedback"]}).carries_answer
    # a run-file line with an unfit field keeps everything else
    rec = ResultRecord.load({"id": "q1", "refused": True, "budgets": "not an object", "kind": None, "trace": []})
    assert rec.id == "q1" and rec.refused and rec.budgets == Budgets() and rec.kind == "answerable"

    with pytest.raises(UnknownDetailKeyError, match="scorez"):
        parse_detail("grade", {"scorez": {}}, strict=True)
    with pytest.raises(UnknownDetailKeyError):
        parse_detail("renamed_node", {}, strict=True)
    with pytest.raises(UnknownDetailKeyError):
        parse_detail("grade", RewriteDetail(), strict=True)
    assert parse_detail("refine", {"kept": [["c", 0, 4, 0.5]]}, strict=True) == RefineDetail(kept=[("c", 0, 4, 0.5)])


def test_a_node_that_records_an_undefined_key_fails_the_turn(coll: Collection) -> None:
    rt = build_agent(coll).runtime

    async def renamed_key(_state: Any, _rt: Any) -> NodeResult:
        return NodeResult({}, "CORRECT", {"scores": {}, "kept_ids": []})

    with pytest.raises(UnknownDetailKeyError, match="kept_ids"):
        asyncio.run(_bind("grade", renamed_key, rt)({}))  # type: ignore[typeddict-item]


def test_every_node_has_a_detail_model() -> None:
    assert set(NODES) == set(DETAILS)
    for node, kind in DETAILS.items():  # every key has a default: a stored row that lacks one still loads
        rec = TraceRecord.model_validate({"node": node, "decision": "d", "detail": {}})
        assert type(rec.detail) is kind


STRING_KEY_READS = re.compile(r"\.detail\[|\.detail\.get\(|get\(\"detail\"\)|\[\"detail\"\]|graph_state|\bans\.state\b")


TYPED_MODELS = {"ragloop/agent/answer.py", "ragloop/agent/types.py"}
"""Where the typed answer and trace record are made from the graph's dicts: the only readers of them."""


def test_no_consumer_reads_details_or_state_by_string_key() -> None:
    offenders = []
    for path in sorted((REPO / "ragloop").rglob("*.py")):
        if str(path.relative_to(REPO)) in TYPED_MODELS:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if STRING_KEY_READS.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert not offenders, "read the typed answer / typed details instead:\n" + "\n".join(offenders)
