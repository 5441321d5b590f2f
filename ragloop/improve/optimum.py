"""The AutoRAG-style offline optimum: the denominator of the loop's outcome 4.

What could the knobs the remediations turn achieve with *full* gold labels? `search` answers that
on the traffic part of a data set (the simulation's split, `simulation.split`), never the held-out
part, then `held_out_score` measures the chosen config on the held-out part, the same items the
loop's final pipeline is measured on.

**The space** is exactly the remediations' (`SPACE`): retrieval mode and top k (the ranking
buffer's retrieval refit, `remediation.ranking` / `remediation.topk`), the fusion weight (the same
refit, hybrid only), the gate τL (`remediation.thresholds`; τU follows it up where τL would pass it),
the prompt variant and the answer graph's knobs, knowledge refinement on/off and the answer's
sentence cap (`remediation.prompts`); where the deployment allows a reader, the answer check's
threshold (`check_stage`, `remediation.answer_check`). Not in it: global chunking (the loop re-chunks one
document at a time, so the start's chunk size is the optimum's too) and the tier-1 model (it
routes evaluations, it does not answer).

**The search** is AutoRAG's node-by-node greedy: stages in pipeline order (retrieval, fusion,
gate, prompt, answer), each stage's grid evaluated with the earlier stages fixed at their best, ties kept
at the earlier choice. A full product grid would be ~1,000 configs of a full agent run each;
node-wise search is what AutoRAG itself does and costs the sum, not the product, of the stages.

**The score** is end-to-end accuracy per item (`ragloop.evaluation.metrics.item`: a refusal right
on an unanswerable item, a correct answer on an answerable one; underspecified items carry none),
the metric the simulation reports; each config's run is `ragloop.evaluation.runner.run_suite`,
cached per version id under `out_dir`, so a rerun continues.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragloop.agent.prompts import VARIANTS
from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.metrics.item import item_metrics
from ragloop.evaluation.stats import bootstrap_ci
from ragloop.evaluation.suites import EvalItem, Suite
from ragloop.improve.simulation.split import item_group, split


@dataclass(frozen=True)
class Knob:
    path: tuple[str, ...]
    values: tuple[Any, ...]

    @property
    def name(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True)
class Stage:
    name: str
    knobs: tuple[Knob, ...]
    when: Callable[[PipelineConfig], bool] = lambda _cfg: True


SPACE: tuple[Stage, ...] = (
    Stage(
        "retrieval",
        (Knob(("retrieval", "mode"), ("hybrid", "dense", "bm25")), Knob(("retrieval", "k"), (2, 3, 5, 8))),
    ),
    Stage(
        "fusion",
        (Knob(("retrieval", "fusion", "dense_weight"), (0.2, 0.4, 0.6, 0.8)),),
        when=lambda cfg: cfg.retrieval.mode == "hybrid",
    ),
    Stage("gate", (Knob(("agent", "tau_lower"), (0.0, 0.1, 0.2, 0.3, 0.4)),)),
    Stage("prompt", (Knob(("agent", "prompt_version"), tuple(VARIANTS)),)),
    # the answer graph's knobs the answer-graph candidate turns (`remediation.prompts.variants`)
    Stage("answer", (Knob(("agent", "refine"), (True, False)), Knob(("agent", "max_answer_sentences"), (3, 8)))),
)


CHECK_TAUS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)


def check_stage(reader: str, taus: Sequence[float] = CHECK_TAUS) -> Stage:
    """The answer check's stage, last (it reads the drafted answer): τ_answer for `reader`, the one the
    deployment lets the loop turn on (`RAGLOOP_ANSWER_CHECK`); the anchor (τ 0) is the check off."""
    return Stage(
        "check",
        (Knob(("agent", "scorers", "answer_check"), (reader,)), Knob(("agent", "tau_answer"), tuple(taus))),
    )


def space(answer_check: str | None = None) -> tuple[Stage, ...]:
    return SPACE + ((check_stage(answer_check),) if answer_check else ())


def overrides(settings: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in settings.items():
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def apply(config: PipelineConfig, settings: Mapping[tuple[str, ...], Any]) -> PipelineConfig:
    """`config` with the knob values set; τU is raised to τL where τL would pass it."""
    over = overrides(settings)
    tau = (over.get("agent") or {}).get("tau_lower")
    if tau is not None and tau > config.agent.tau_upper:
        over["agent"]["tau_upper"] = tau
    return config.with_overrides(**over)


ItemScores = dict[str, float]
"""item id -> end-to-end accuracy (0 or 1); items without one are left out."""
Scorer = Callable[[PipelineConfig, Sequence[EvalItem]], ItemScores]


@dataclass(frozen=True)
class Trial:
    stage: str
    settings: dict[str, Any]
    version_id: str
    accuracy: float
    n: int

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "settings": self.settings,
            "version_id": self.version_id,
            "accuracy": round(self.accuracy, 6),
            "n": self.n,
        }


@dataclass
class OptimumResult:
    start: PipelineConfig
    best: PipelineConfig
    trials: list[Trial] = field(default_factory=list)

    @property
    def changes(self) -> dict[str, Any]:
        from ragloop.experiments.auto import changes

        return changes(self.start, self.best)

    def to_json(self) -> dict[str, Any]:
        return {
            "start_version": self.start.version_id,
            "best_version": self.best.version_id,
            "changes": self.changes,
            "best_config": self.best.model_dump(mode="json", by_alias=True),
            "trials": [t.to_json() for t in self.trials],
        }


def _mean(scores: ItemScores) -> float:
    return float(np.mean(list(scores.values()))) if scores else 0.0


def search(
    start: PipelineConfig, traffic: Sequence[EvalItem], score: Scorer, space: Sequence[Stage] = SPACE
) -> OptimumResult:
    """Node-by-node greedy search on the traffic items (see the module docstring)."""
    best = start
    best_acc = _mean(score(best, traffic))
    result = OptimumResult(start=start, best=start)
    result.trials.append(Trial("start", {}, start.version_id, best_acc, len(traffic)))
    for stage in space:
        if not stage.when(best):
            continue
        anchor = best
        for combo in itertools.product(*(k.values for k in stage.knobs)):
            values = {k.path: v for k, v in zip(stage.knobs, combo, strict=True)}
            try:
                cfg = apply(anchor, values)
            except ValueError:
                continue  # an invalid combination (e.g. τL above a fixed τU) is not a config
            scores = score(cfg, traffic)
            acc = _mean(scores)
            named = {k.name: v for k, v in zip(stage.knobs, combo, strict=True)}
            result.trials.append(Trial(stage.name, named, cfg.version_id, acc, len(scores)))
            if acc > best_acc + 1e-12:
                best, best_acc = cfg, acc
    result.best = best
    return result


def runner_scorer(
    suite: Suite, settings: Settings, out_dir: Path, *, workers: int = 2, judge: str = "lexical"
) -> Scorer:
    """Score a config by running the evaluation runner (results cached per version id under `out_dir`)."""
    from ragloop.evaluation.runner import read_records, run_suite

    def score(config: PipelineConfig, items: Sequence[EvalItem]) -> ItemScores:
        run_dir = out_dir / config.version_id
        run_suite(suite, config.name, config, run_dir, settings=settings, items=items, workers=workers, judge=judge)
        wanted = {i.id for i in items}
        out: ItemScores = {}
        for rec in read_records(run_dir / "items.jsonl"):
            pair = item_metrics(rec).get("e2e_accuracy")
            if rec.get("id") in wanted and pair is not None and pair[1]:
                out[str(rec["id"])] = pair[0] / pair[1]
        return out

    return score


def sample_items(items: Sequence[EvalItem], n: int | None, key: str) -> list[EvalItem]:
    """A fixed random sample of `n` items in their order (all when `n` is None or larger): the
    search's traffic slice spans every traffic article, where the first `n` would be one or two."""
    if n is None or n >= len(items):
        return list(items)
    import random

    return [items[i] for i in sorted(random.Random(key).sample(range(len(items)), n))]


def sim_heldout(dataset: str, path: str | Path | None = None) -> list[EvalItem]:
    """The simulation's held-out items in its order (`simulation.data`), the list its sample is drawn from."""
    from ragloop.improve.simulation.data import load_mtrag_sim, load_squad_sim

    return (load_squad_sim(path) if dataset == "squad" else load_mtrag_sim(path)).heldout


def loop_config(results: Path, arm: str, searched: OptimumResult, reader: str | None = None) -> PipelineConfig:
    """The config the arm of a simulation results JSON served at its last measurement. The JSON
    keeps version ids, not configs; a version id is the config's content hash, so the config is
    found among those the search built (the start and every trial; with `reader`, each of them with
    the answer check at any τ the check's fit can pick) or it is an error."""
    import json

    doc = json.loads(results.read_text(encoding="utf-8"))
    arms = {a["label"]: a for a in doc.get("arms", [])}
    if arm not in arms:
        raise LookupError(f"no arm {arm!r} in {results} (arms: {', '.join(arms)})")
    served = arms[arm]["measurements"][-1]["versions"]
    if len(served) != 1:
        raise ValueError(f"{arm} served {len(served)} versions at its last measurement (an experiment ran)")
    version = next(iter(served))
    known = {searched.start.version_id: searched.start, searched.best.version_id: searched.best}
    for t in searched.trials:
        if t.version_id not in known:
            stage_cfg = apply(searched.start, {tuple(k.split(".")): v for k, v in t.settings.items()})
            known[stage_cfg.version_id] = stage_cfg
    if version not in known and reader:  # the loop's check fit picks τ_answer on the thresholds' grid
        from ragloop.improve.remediation.thresholds import GRID

        for cfg in list(known.values()):
            for tau in GRID:
                checked = apply(cfg, {("agent", "scorers", "answer_check"): reader, ("agent", "tau_answer"): tau})
                known.setdefault(checked.version_id, checked)
    if version not in known:
        raise LookupError(f"{arm}'s final version {version} is neither the start nor a searched config")
    return known[version]


def split_items(items: Sequence[EvalItem]) -> tuple[list[EvalItem], list[EvalItem]]:
    """(traffic, held-out test), by the simulation's split (`simulation.split.item_group`)."""
    parts = split(items, item_group)
    return parts.traffic, parts.test


@dataclass(frozen=True)
class HeldOut:
    accuracy: float
    lo: float
    hi: float
    n: int

    def to_json(self) -> dict[str, Any]:
        return {"accuracy": round(self.accuracy, 6), "ci95": [round(self.lo, 6), round(self.hi, 6)], "n": self.n}


def held_out_score(config: PipelineConfig, test: Sequence[EvalItem], score: Scorer) -> HeldOut:
    values = list(score(config, test).values())
    est = bootstrap_ci(values) if values else None
    return HeldOut(est.value if est else 0.0, est.lo if est else 0.0, est.hi if est else 0.0, len(values))
