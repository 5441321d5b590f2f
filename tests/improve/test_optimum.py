"""The offline optimum: node-by-node search over the remediations' knobs on the traffic part, the
held-out part untouched until the chosen config is scored on it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from ragloop.agent.prompts import VARIANTS
from ragloop.config import PipelineConfig
from ragloop.evaluation.suites import EvalItem
from ragloop.improve.optimum import (
    SPACE,
    ItemScores,
    apply,
    held_out_score,
    loop_config,
    sample_items,
    search,
    space,
    split_items,
)
from ragloop.improve.simulation.split import is_test, item_group

DEGRADED = PipelineConfig().with_overrides(retrieval={"mode": "dense", "k": 2})


def _items(n: int, prefix: str = "conv") -> list[EvalItem]:
    return [
        EvalItem(id=f"{prefix}{i}<::>3", question=f"q{i}", kind="answerable", should_refuse=False) for i in range(n)
    ]


def _accuracy(cfg: PipelineConfig) -> float:
    """A made-up landscape: hybrid beats dense, k=5 is best, dense weight 0.6, τL 0.1."""
    r, a = cfg.retrieval, cfg.agent
    acc = 0.2 + (0.2 if r.mode == "hybrid" else 0.0) + {2: 0.0, 3: 0.05, 5: 0.1, 8: 0.08}.get(r.k, 0.0)
    acc += 0.05 if r.mode == "hybrid" and r.fusion.dense_weight == 0.6 else 0.0
    acc += {0.1: 0.1, 0.2: 0.05}.get(a.tau_lower, 0.0)
    return acc


def _scorer(seen: list[tuple[str, int]]):
    def score(cfg: PipelineConfig, items: Sequence[EvalItem]) -> ItemScores:
        seen.append((cfg.version_id, len(items)))
        acc = _accuracy(cfg)
        return {it.id: 1.0 if (i % 100) < acc * 100 else 0.0 for i, it in enumerate(items)}

    return score


def test_the_search_finds_the_best_knobs_stage_by_stage() -> None:
    traffic, _ = split_items(_items(300))
    seen: list[tuple[str, int]] = []
    result = search(DEGRADED, traffic, _scorer(seen))
    best = result.best
    assert (best.retrieval.mode, best.retrieval.k, best.retrieval.fusion.dense_weight) == ("hybrid", 5, 0.6)
    assert best.agent.tau_lower == 0.1 and best.chunking == DEGRADED.chunking  # chunking is not a knob
    assert result.changes["retrieval"]["mode"] == "hybrid"
    stages = [t.stage for t in result.trials]
    assert stages.count("retrieval") == 12 and stages.count("fusion") == 4 and stages.count("gate") == 5
    assert stages.count("prompt") == len(VARIANTS) and stages.count("answer") == 4
    assert {n for _, n in seen} == {len(traffic)}
    assert [s.name for s in SPACE] == ["retrieval", "fusion", "gate", "prompt", "answer"]


def test_the_fusion_stage_is_skipped_off_hybrid() -> None:
    traffic = _items(50)

    def dense_wins(cfg: PipelineConfig, items: Sequence[EvalItem]) -> ItemScores:
        good = cfg.retrieval.mode == "dense"
        return {it.id: 1.0 if good else 0.0 for it in items}

    result = search(DEGRADED, traffic, dense_wins)
    assert result.best.retrieval.mode == "dense" and "fusion" not in {t.stage for t in result.trials}


def test_the_split_keeps_the_held_out_part_apart_and_scores_it() -> None:
    items = _items(400)
    traffic, test = split_items(items)
    assert {item_group(i) for i in traffic}.isdisjoint({item_group(i) for i in test})
    assert all(is_test(item_group(i)) for i in test) and 0.2 < len(test) / len(items) < 0.4
    squad = EvalItem(id="x", question="q", kind="answerable", should_refuse=False, meta={"title": "Normans"})
    assert item_group(squad) == "Normans" and item_group(items[0]) == "conv0"
    seen: list[tuple[str, int]] = []
    h = held_out_score(PipelineConfig(), test, _scorer(seen))
    assert h.n == len(test) and h.lo <= h.accuracy <= h.hi and seen == [(PipelineConfig().version_id, len(test))]


def test_outcome_4_is_the_paired_ratio_with_an_interval() -> None:
    from ragloop.improve.simulation.outcomes import outcome_4

    ids = [f"q{i}" for i in range(100)]
    loop = {i: 1.0 if n < 40 else 0.0 for n, i in enumerate(ids)}
    best = {i: 1.0 if n < 50 else 0.0 for n, i in enumerate(ids)}
    o = outcome_4("squad", loop, best | {"extra": 1.0})  # an item only one side scored is left out
    assert o["n"] == 100 and o["fraction"] == 0.8 and o["met"] is None
    lo, hi = o["ci95"]
    assert lo < 0.8 < hi <= 1.0  # paired: the loop's correct items are a subset, so the ratio stays <= 1
    same = outcome_4("squad", best, best)
    assert same["fraction"] == 1.0 and same["ci95"] == [1.0, 1.0]
    assert outcome_4("squad", loop, dict.fromkeys(ids, 0.0))["fraction"] is None


def test_outcome_4_goes_into_finished_results_and_nothing_else_changes(tmp_path: Path) -> None:
    from ragloop.improve.simulation.report import write_outcome_4

    doc = {"meta": {"command": "x"}, "outcomes": {"1": {"squad": {"met": False}}, "5": {"wall_s": 1.0}}, "arms": []}
    js = tmp_path / "r.json"
    js.write_text(json.dumps(doc, indent=1))
    md = tmp_path / "r.md"
    table = "| # | data set | outcome | numbers | result |\n|---|---|---|---|---|\n| 1 | squad | a | b | c |\n"
    day_rows = "| day | x |\n|---|---|\n| 4 | day four |\n| 5 | day five |\n"
    md.write_text(f"# r\n\n## Outcomes\n\n{table}| 5 | all | cost | {{}} | – |\n\n## Arms\n\n{day_rows}\nrest\n")
    o4 = {"dataset": "squad", "summary": "loop 43% / optimum 50%", "fraction": 0.86}
    write_outcome_4(js, o4)
    write_outcome_4(js, o4 | {"summary": "again"})  # rerun: the row is replaced, not added
    got = json.loads(js.read_text())
    assert got["outcomes"]["4"]["summary"] == "again" and got["outcomes"]["1"] == doc["outcomes"]["1"]
    lines = md.read_text().split("\n")
    assert [ln for ln in lines if ln.startswith("| 4 | squad")] == ["| 4 | squad | vs offline optimum | again | – |"]
    assert (
        lines.index("| 4 | squad | vs offline optimum | again | – |") == lines.index("| 5 | all | cost | {} | – |") - 1
    )
    assert lines[-2:] == ["rest", ""] and "| 4 | day four |" in lines and "| 5 | day five |" in lines


def test_the_loop_version_is_found_among_the_searched_configs(tmp_path: Path) -> None:
    traffic = _items(60)
    result = search(DEGRADED, traffic, _scorer([]))
    path = tmp_path / "r.json"

    def arm(version: str) -> None:
        path.write_text(json.dumps({"arms": [{"label": "a", "measurements": [{"versions": {version: 100}}]}]}))

    arm(DEGRADED.version_id)
    assert loop_config(path, "a", result) == DEGRADED
    arm(result.best.version_id)
    assert loop_config(path, "a", result).version_id == result.best.version_id
    arm("pv-unknown")
    with pytest.raises(LookupError):
        loop_config(path, "a", result)
    with pytest.raises(LookupError):
        loop_config(path, "b", result)


def test_the_answer_check_is_searched_last_and_the_loops_fitted_threshold_is_found(tmp_path: Path) -> None:
    reader = "llm:scripted"

    def check_helps(cfg: PipelineConfig, items: Sequence[EvalItem]) -> ItemScores:
        on = cfg.agent.scorers.answer_check == reader and cfg.agent.tau_answer > 0
        acc = _accuracy(cfg) + (0.2 - abs(cfg.agent.tau_answer - 0.15) if on else 0.0)
        return {it.id: 1.0 if (i % 100) < acc * 100 else 0.0 for i, it in enumerate(items)}

    assert space() == SPACE and [s.name for s in space(reader)][-1] == "check"
    result = search(DEGRADED, _items(100), check_helps, space(reader))
    assert result.best.agent.scorers.answer_check == reader and result.best.agent.tau_answer == 0.15
    assert result.best.retrieval.k == 5  # the earlier stages as without the check
    path = tmp_path / "r.json"
    fitted = apply(DEGRADED, {("agent", "scorers", "answer_check"): reader, ("agent", "tau_answer"): 0.11})
    path.write_text(json.dumps({"arms": [{"label": "a", "measurements": [{"versions": {fitted.version_id: 9}}]}]}))
    assert loop_config(path, "a", result, reader).version_id == fitted.version_id
    with pytest.raises(LookupError):  # without the reader the fitted threshold is not among the configs
        loop_config(path, "a", result)


def test_the_traffic_sample_is_fixed_and_spans_the_part() -> None:
    items = _items(500)
    a, b = sample_items(items, 50, "k"), sample_items(items, 50, "k")
    assert [i.id for i in a] == [i.id for i in b] and len(a) == 50
    assert a != items[:50] and sample_items(items, None, "k") == items and sample_items(items, 900, "k") == items
    assert [items.index(i) for i in a] == sorted(items.index(i) for i in a)
