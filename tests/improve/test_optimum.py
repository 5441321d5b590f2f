"""The offline optimum: node-by-node search over the remediations' knobs on the traffic part, the
held-out part untouched until the chosen config is scored on it."""

from __future__ import annotations

from collections.abc import Sequence

from ragloop.agent.prompts import VARIANTS
from ragloop.config import PipelineConfig
from ragloop.evaluation.suites import EvalItem
from ragloop.improve.optimum import SPACE, ItemScores, held_out_score, search, split_items
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
