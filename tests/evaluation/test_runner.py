"""The runner on a tiny golden set over a real (hashed-embedder) collection: records, traces,
the conversation path, resume after a kill, torn lines, version guard, the process pool."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.runner import RunError, read_records, run_suite
from ragloop.evaluation.suites import golden_suite
from ragloop.retrieval.collection import Collection


class Killed(BaseException):
    """Stands in for SIGKILL/Ctrl-C in the middle of a run."""


def _run(suite: Any, cfg: PipelineConfig, out: Path, **kw: Any) -> Any:
    return run_suite(suite, "tiny", cfg, out, settings=Settings(), workers=1, judge="lexical", **kw)


def test_records_hold_trace_gold_and_the_conversation_path(
    kb: Collection, golden_path: Path, tiny_config: PipelineConfig, tmp_path: Path
) -> None:
    suite = golden_suite(golden_path, "kb")
    res = _run(suite, tiny_config, tmp_path / "run")
    assert (res.total, res.ran, res.errors) == (6, 6, 0)
    recs = {r["id"]: r for r in read_records(tmp_path / "run" / "items.jsonl")}
    g1 = recs["g1"]
    assert g1["trace"][0]["node"] == "condense" and any(t["node"] == "grade" for t in g1["trace"])
    assert g1["gold_docs"] == ["bridge.md"] and g1["chunks"]
    assert set(g1["judged"]) >= {"faithfulness", "citation_precision", "context_recall"}
    assert recs["g5"]["should_refuse"] and recs["g5"]["gold_docs"] == []
    # the follow-up went through the thread: one earlier turn answered first, and condensed
    g6 = recs["g6"]
    assert [h["question"] for h in g6["history_turns"]] == ["Tell me about the Zorblat Bridge."]
    assert "Zorblat" in g6["standalone"]
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["finished"] and meta["version_id"] == tiny_config.version_id and meta["done"] == 6


def test_reference_replies_seed_the_thread_and_only_the_last_turn_is_answered(
    kb: Collection, golden_path: Path, tiny_config: PipelineConfig, tmp_path: Path
) -> None:
    g6 = next(i for i in golden_suite(golden_path, "kb").items if i.id == "g6")
    item = replace(g6, history_replies=("It is a bridge [1].",))
    suite = replace(golden_suite(golden_path, "kb"), items=[item])
    _run(suite, tiny_config, tmp_path / "run")
    (rec,) = read_records(tmp_path / "run" / "items.jsonl")
    assert rec["history_turns"] == [
        {"question": "Tell me about the Zorblat Bridge.", "answer": "It is a bridge [1].", "reference": True}
    ]
    assert rec["history_latency_ms"] == 0.0  # nothing was answered before the last turn
    assert "Zorblat" in rec["standalone"] and not rec.get("error")


def test_a_killed_run_resumes_without_redoing_finished_items(
    kb: Collection, golden_path: Path, tiny_config: PipelineConfig, tmp_path: Path
) -> None:
    suite = golden_suite(golden_path, "kb")
    out = tmp_path / "run"
    seen: list[str] = []

    def kill_after_two(rec: dict[str, Any], done: int, total: int) -> None:
        seen.append(rec["id"])
        if done == 2:
            raise Killed

    with pytest.raises(Killed):
        _run(suite, tiny_config, out, on_item=kill_after_two)
    first = read_records(out / "items.jsonl")
    assert [r["id"] for r in first] == seen == ["g1", "g2"]
    assert not json.loads((out / "run.json").read_text())["finished"]
    # a kill in the middle of a write leaves a torn line: it is cut off, not parsed
    with (out / "items.jsonl").open("a") as fh:
        fh.write('{"id": "g3", "trace": [')

    second: list[str] = []
    res = _run(suite, tiny_config, out, on_item=lambda r, d, t: second.append(r["id"]))
    assert second == ["g3", "g4", "g5", "g6"]
    assert (res.skipped, res.ran) == (2, 4)
    lines = (out / "items.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["g1", "g2", "g3", "g4", "g5", "g6"]
    assert {r["id"]: r["wall_ms"] for r in read_records(out / "items.jsonl")}["g1"] == first[0]["wall_ms"]
    # a third run has nothing left to do
    again = _run(suite, tiny_config, out)
    assert (again.ran, again.skipped) == (0, 6)
    meta = json.loads((out / "run.json").read_text())
    assert meta["finished"] and meta["sessions"] == 3


def test_results_of_another_pipeline_version_are_not_mixed_in(
    kb: Collection, golden_path: Path, tiny_config: PipelineConfig, tmp_path: Path
) -> None:
    suite = golden_suite(golden_path, "kb")
    items = suite.items[:1]
    _run(suite, tiny_config, tmp_path / "run", items=items)
    other = tiny_config.with_overrides(agent={"tau_upper": 0.9})
    with pytest.raises(RunError, match="pipeline version"):
        _run(suite, other, tmp_path / "run", items=items)
    res = _run(suite, other, tmp_path / "run", items=items, fresh=True)
    assert res.ran == 1


def test_errors_are_recorded_and_retried_on_resume(
    kb: Collection, golden_path: Path, tiny_config: PipelineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragloop.evaluation import runner

    suite = golden_suite(golden_path, "kb")
    items = suite.items[:2]
    real = runner.ItemRunner._answer

    async def flaky(self: Any, item: Any) -> dict[str, Any]:
        if item.id == "g2":
            raise RuntimeError("model went away")
        return await real(self, item)

    monkeypatch.setattr(runner.ItemRunner, "_answer", flaky)
    res = _run(suite, tiny_config, tmp_path / "run", items=items)
    assert res.errors == 1
    monkeypatch.setattr(runner.ItemRunner, "_answer", real)
    res = _run(suite, tiny_config, tmp_path / "run", items=items)
    assert (res.ran, res.errors) == (1, 0)
    assert all(not r.get("error") for r in read_records(tmp_path / "run" / "items.jsonl"))


@pytest.mark.slow
def test_the_process_pool_runs_items_in_parallel(
    kb: Collection, golden_path: Path, tiny_config: PipelineConfig, tmp_path: Path
) -> None:
    suite = golden_suite(golden_path, "kb")
    res = run_suite(
        suite,
        "tiny",
        tiny_config,
        tmp_path / "run",
        settings=Settings(),
        items=suite.items[:4],
        workers=2,
        judge="lexical",
    )
    assert (res.ran, res.errors) == (4, 0)
    assert sorted(r["id"] for r in read_records(tmp_path / "run" / "items.jsonl")) == ["g1", "g2", "g3", "g4"]


def test_judge_repeats_record_the_spread(
    kb: Collection, golden_path: Path, tiny_config: PipelineConfig, tmp_path: Path
) -> None:
    from ragloop.evaluation.report import build_report
    from ragloop.models.scoring import FunctionScorer

    rng = random.Random(3)

    def wobbly(_a: str, _b: str) -> float:  # an LLM judge that does not always agree with itself
        return rng.random()

    suite = golden_suite(golden_path, "kb")
    runs = tmp_path / "runs"
    res = _run(
        suite,
        tiny_config,
        runs / "golden" / "tiny",
        items=suite.items[:2],
        judge_repeats=3,
        scorers={"judge": FunctionScorer(wobbly, name="test:wobbly")},
    )
    assert res.ran == 2
    spreads = [r["judge_spread"] for r in read_records(runs / "golden" / "tiny" / "items.jsonl")]
    assert all(s and max(s.values()) > 0 for s in spreads)
    rep = build_report(runs, resamples=50)
    assert rep.suites["golden"]["tiny"].judge_spread["faithfulness"] >= 0
