"""What a report knows, before any rendering: the metric catalogue (label, group, format), the runs
of every suite x config with their bootstrap estimates, and the paired comparisons between configs.
Apart from the renderers (`report`, `charts`) so they share one model and import nothing from each other."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragloop.evaluation.failures import pick_failures
from ragloop.evaluation.judge import judge_warning
from ragloop.evaluation.metrics.item import item_metrics
from ragloop.evaluation.metrics.ops import ops_values
from ragloop.evaluation.records import ResultRecord
from ragloop.evaluation.runner import read_records
from ragloop.evaluation.stats import Estimate, PairedTest, bootstrap_ci, bootstrap_percentile, paired_test

CONFIG_ORDER = (
    "baseline",
    "hybrid",
    "hybrid_rerank",
    "full",
    "no_refine",
    "no_critique",
    "no_citation_validation",
    "no_rewrite",
)
SUITE_ORDER = ("squad", "mtrag", "cacm", "golden")
SUITE_TITLES = {"squad": "SQuAD 2.0 dev", "mtrag": "MTRAG-UN dev", "cacm": "CACM", "golden": "Golden set"}

# key, label, group, format ("pct" | "num" | "num1" | "ms")
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("first_recall@k", "Recall@k (first retrieval)", "Retrieval", "num"),
    ("first_mrr@k", "MRR@k (first retrieval)", "Retrieval", "num"),
    ("first_ndcg@10", "nDCG@10 (first retrieval)", "Retrieval", "num"),
    ("first_map", "MAP (first retrieval)", "Retrieval", "num"),
    ("final_recall@k", "Recall (final context)", "Retrieval", "num"),
    ("final_mrr@k", "MRR (final context)", "Retrieval", "num"),
    ("final_ndcg@10", "nDCG@10 (final context)", "Retrieval", "num"),
    ("final_map", "MAP (final context)", "Retrieval", "num"),
    ("recall@10", "Recall@10", "Retrieval", "num"),
    ("recall@100", "Recall@100", "Retrieval", "num"),
    ("mrr@10", "MRR@10", "Retrieval", "num"),
    ("ndcg@10", "nDCG@10", "Retrieval", "num"),
    ("p@30", "P@30", "Retrieval", "num"),
    ("map", "MAP", "Retrieval", "num"),
    ("grader_set_precision", "Grader precision (set)", "Agent decisions", "pct"),
    ("grader_set_recall", "Grader recall (set)", "Agent decisions", "pct"),
    ("grader_chunk_precision", "Grader precision (chunk)", "Agent decisions", "pct"),
    ("grader_chunk_recall", "Grader recall (chunk)", "Agent decisions", "pct"),
    ("verdict_correct", "First verdict CORRECT", "Agent decisions", "pct"),
    ("verdict_ambiguous", "First verdict AMBIGUOUS", "Agent decisions", "pct"),
    ("verdict_incorrect", "First verdict INCORRECT", "Agent decisions", "pct"),
    ("verdict_accuracy", "CRAG verdict accuracy", "Agent decisions", "pct"),
    ("correct_refusal", "Correct-refusal rate (unanswerable)", "Agent decisions", "pct"),
    ("false_refusal", "False-refusal rate (answerable)", "Agent decisions", "pct"),
    ("refusal_underspecified", "Refusal rate (underspecified)", "Agent decisions", "pct"),
    ("rewrite_success", "Rewrite success rate", "Agent decisions", "pct"),
    ("rewrites", "Rewrites / query", "Agent decisions", "num"),
    ("loop_rate_answerable", "Loop rate (answerable)", "Agent decisions", "pct"),
    ("loop_rate_unanswerable", "Loop rate (unanswerable, correct behaviour)", "Agent decisions", "pct"),
    ("steps", "Steps / query (mean)", "Agent decisions", "num"),
    ("steps_p95", "Steps / query (p95)", "Agent decisions", "num"),
    ("critique_cycles", "Critique cycles / query", "Agent decisions", "num"),
    ("deficiencies_found", "Deficiencies found / query", "Agent decisions", "num"),
    ("deficiencies_resolved", "Deficiencies resolved / query", "Agent decisions", "num"),
    ("deficiency_resolution_rate", "Deficiencies resolved / found", "Agent decisions", "pct"),
    ("citation_precision", "Citation precision", "Citations and answers", "pct"),
    ("citation_recall", "Citation recall", "Citations and answers", "pct"),
    ("context_sufficiency", "Retrieval precision (judge: context suffices)", "Citations and answers", "pct"),
    ("faithfulness", "Faithfulness (RAGAS)", "Citations and answers", "num"),
    ("answer_relevancy", "Answer relevancy (RAGAS, offline variant)", "Citations and answers", "num"),
    ("context_precision@k", "Context precision@k (RAGAS)", "Citations and answers", "num"),
    ("context_recall", "Context recall (RAGAS)", "Citations and answers", "num"),
    ("judge_correct", "Correct (judge: answer covers >= half the reference claims)", "Citations and answers", "pct"),
    ("answer_correctness", "Answer correctness (RAGAS claim F1 vs reference)", "Citations and answers", "num"),
    ("token_f1", "Token F1 vs reference", "Citations and answers", "num"),
    ("squad_em", "SQuAD EM (refusal = no answer)", "Citations and answers", "pct"),
    ("squad_f1", "SQuAD F1 (refusal = no answer)", "Citations and answers", "pct"),
    ("squad_hasans_f1", "SQuAD F1, answerable only", "Citations and answers", "pct"),
    ("squad_noans_accuracy", "SQuAD no-answer accuracy", "Citations and answers", "pct"),
    ("answer_contains_gold", "Answer contains gold (answerable)", "Citations and answers", "pct"),
    ("answer_accuracy_answered", "Answer correct when answered", "Citations and answers", "pct"),
    ("answer_words", "Answer length (words, answered items)", "Citations and answers", "num1"),
    ("e2e_accuracy", "End-to-end accuracy", "Citations and answers", "pct"),
    ("latency_p50", "Latency p50 (ms)", "Operations", "ms"),
    ("latency_p95", "Latency p95 (ms)", "Operations", "ms"),
    ("conversation_p50", "Conversation latency p50 (ms, all turns)", "Operations", "ms"),
    ("latency_ms_mean", "Latency mean (ms)", "Operations", "ms"),
    ("tokens_per_query", "Tokens / query", "Operations", "num"),
    ("cost_per_query", "Cost / query (USD)", "Operations", "num"),
    ("cache_hit_rate", "Cache hit rate (trace records)", "Operations", "pct"),
)
LABELS = {k: lab for k, lab, _, _ in METRICS}
FORMATS = {k: f for k, _, _, f in METRICS}
GATE_OPEN_NA = ("grader_", "verdict_")
REWRITE_NA = ("rewrite_success", "loop_rate_")
CRITIQUE_NA = ("critique_cycles", "deficienc")
PAIRED_METRICS = (
    "first_recall@k",
    "first_mrr@k",
    "correct_refusal",
    "false_refusal",
    "e2e_accuracy",
    "squad_f1",
    "faithfulness",
    "citation_precision",
    "steps",
    "latency_ms_mean",
    "map",
    "ndcg@10",
)


@dataclass
class ConfigRun:
    suite: str
    config: str
    meta: dict[str, Any]
    records: list[dict[str, Any]]
    metrics: dict[str, Estimate] = field(default_factory=dict)
    pairs: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    """item id -> metric -> (num, den)"""
    terminations: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[dict[str, Any], str, str]] = field(default_factory=list)
    failure_counts: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    judge_spread: dict[str, float] = field(default_factory=dict)
    """metric -> mean over items of (max - min) across the judge's repeats (judge_repeats > 1)."""

    @property
    def agent_cfg(self) -> dict[str, Any]:
        return (self.meta.get("config") or {}).get("agent") or {}

    def not_applicable(self, key: str) -> bool:
        a = self.agent_cfg
        if not a:
            return False
        if key.startswith(GATE_OPEN_NA) and float(a.get("tau_lower", 0.3)) <= 0 and float(a.get("tau_upper", 0.7)) <= 0:
            return True
        if key.startswith(REWRITE_NA) and not a.get("rewrite", True):
            return True
        return key.startswith(CRITIQUE_NA) and not a.get("critique", True)


@dataclass
class Report:
    suites: dict[str, dict[str, ConfigRun]]
    comparisons: dict[str, list[tuple[str, str, str, PairedTest]]]
    warnings: list[str]
    calibrations: dict[str, dict[str, Any]]


def _order(names: Sequence[str], order: Sequence[str]) -> list[str]:
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n))


def load_runs(runs_dir: Path) -> dict[str, dict[str, ConfigRun]]:
    out: dict[str, dict[str, ConfigRun]] = {}
    for meta_path in sorted(runs_dir.glob("*/*/run.json")):
        run_dir = meta_path.parent
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        records = read_records(run_dir / "items.jsonl")
        wanted = set(meta.get("item_ids") or [r["id"] for r in records])
        records = sorted((r for r in records if r["id"] in wanted), key=lambda r: str(r["id"]))
        suite = str(meta.get("suite") or run_dir.parent.name)
        config = str(meta.get("config_name") or run_dir.name)
        out.setdefault(suite, {})[config] = ConfigRun(suite, config, meta, records)
    return out


def summarise(run: ConfigRun, resamples: int = 1000) -> None:
    sums: dict[str, list[tuple[float, float]]] = {}
    values: dict[str, list[float]] = {}
    spreads: dict[str, list[float]] = {}
    for raw in run.records:
        rec = ResultRecord.load(raw)
        if rec.error:
            run.errors += 1
            continue
        for k, v in rec.judge_spread.items():
            spreads.setdefault(k, []).append(v)
        m = item_metrics(rec)
        run.pairs[rec.id] = m
        for k, p in m.items():
            if k.startswith("termination:"):
                run.terminations[k.split(":", 1)[1]] += 1
                continue
            sums.setdefault(k, []).append(p)
        if rec.mode == "agent":
            for k, vs in ops_values(rec).items():
                values.setdefault(k, []).extend(vs)
            values.setdefault("steps_all", []).append(float(len(rec.trace)))
    for k, ps in sums.items():
        run.metrics[k] = bootstrap_ci([p[0] for p in ps], [p[1] for p in ps], resamples=resamples)
    if values.get("latency_ms"):
        run.metrics["latency_p50"] = bootstrap_percentile(values["latency_ms"], 50, resamples=resamples)
        run.metrics["latency_p95"] = bootstrap_percentile(values["latency_ms"], 95, resamples=resamples)
        run.metrics["steps_p95"] = bootstrap_percentile(values["steps_all"], 95, resamples=resamples)
        if any(ResultRecord.load(r).history for r in run.records):
            run.metrics["conversation_p50"] = bootstrap_percentile(values["conversation_ms"], 50, resamples=resamples)
        for k, vs in values.items():
            if k.startswith("node_ms:"):
                node = k.split(":", 1)[1]
                run.metrics[f"node_p50:{node}"] = bootstrap_percentile(vs, 50, resamples=resamples)
                run.metrics[f"node_p95:{node}"] = bootstrap_percentile(vs, 95, resamples=resamples)
    run.judge_spread = {k: float(np.mean(v)) for k, v in sorted(spreads.items())}
    run.failures, run.failure_counts = pick_failures(run.records)


def compare(a: ConfigRun, b: ConfigRun, metric: str, resamples: int = 1000) -> PairedTest | None:
    ids = sorted(set(a.pairs) & set(b.pairs))
    an, ad, bn, bd = [], [], [], []
    for i in ids:
        pa = a.pairs[i].get(metric, (0.0, 0.0))
        pb = b.pairs[i].get(metric, (0.0, 0.0))
        if pa[1] <= 0 and pb[1] <= 0:
            continue
        an.append(pa[0])
        ad.append(pa[1])
        bn.append(pb[0])
        bd.append(pb[1])
    if len(an) < 2 or sum(ad) <= 0 or sum(bd) <= 0:
        return None
    return paired_test(an, bn, ad, bd, resamples=resamples)


def comparison_pairs(configs: Sequence[str]) -> list[tuple[str, str]]:
    """Which configs are compared paired: each against `baseline`, `full` against
    `hybrid_rerank`, each single-node toggle (`no_*`) and each variant (`full+<chat model>`)
    against `full`."""
    pairs: list[tuple[str, str]] = []
    if "baseline" in configs:
        pairs += [("baseline", c) for c in configs if c != "baseline"]
    if "hybrid_rerank" in configs and "full" in configs:
        pairs.append(("hybrid_rerank", "full"))
    if "full" in configs:
        pairs += [("full", c) for c in configs if c.startswith(("no_", "full+"))]
    return list(dict.fromkeys(pairs))


def build_report(
    runs_dir: Path,
    *,
    calibrations: dict[str, dict[str, Any]] | None = None,
    resamples: int = 1000,
) -> Report:
    suites = load_runs(runs_dir)
    comparisons: dict[str, list[tuple[str, str, str, PairedTest]]] = {}
    warnings: list[str] = []
    calibrations = calibrations or {}
    judges: set[str] = set()
    for suite, runs in suites.items():
        for run in runs.values():
            summarise(run, resamples)
            if run.meta.get("judge"):
                judges.add(str(run.meta["judge"]))
        rows = []
        for a, b in comparison_pairs(list(runs)):
            for metric in PAIRED_METRICS:
                t = compare(runs[a], runs[b], metric, resamples)
                if t is not None:
                    rows.append((a, b, metric, t))
        comparisons[suite] = rows
    for j in sorted(judges):
        w = judge_warning(j, calibrations)
        if w:
            warnings.append(w)
    return Report(suites, comparisons, warnings, calibrations)
