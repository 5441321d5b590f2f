"""Reports: Markdown tables (configs x metrics with 95% intervals), paired comparisons, PNG
charts and failure cases with their traces and a diagnosis.

    report = build_report(runs_dir)          # reads <runs_dir>/<suite>/<config>/{items.jsonl,run.json}
    write_report(report, out_dir)            # report.md, report.json, <suite>-*.png

Charts use matplotlib's Agg backend (no display needed): metric bars with error bars, the
end-to-end latency distribution per config, and the refusal precision/recall curve over tau
(refuse iff the item's max grade < tau; positive class = items that should be refused).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragloop.evaluation.judge import judge_warning
from ragloop.evaluation.metrics.agent import ItemView
from ragloop.evaluation.metrics.item import item_metrics, outcome_metrics
from ragloop.evaluation.metrics.ops import ops_values
from ragloop.evaluation.runner import done_ids, read_records
from ragloop.evaluation.stats import (
    Estimate,
    PairedTest,
    bootstrap_ci,
    bootstrap_percentile,
    paired_test,
)

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
CHART_METRICS = {
    "squad": (
        "first_recall@k",
        "first_mrr@k",
        "correct_refusal",
        "false_refusal",
        "answer_contains_gold",
        "squad_f1",
        "e2e_accuracy",
        "faithfulness",
    ),
    "mtrag": (
        "first_recall@k",
        "first_mrr@k",
        "correct_refusal",
        "false_refusal",
        "e2e_accuracy",
        "faithfulness",
        "citation_precision",
        "token_f1",
    ),
    "cacm": ("recall@10", "recall@100", "mrr@10", "ndcg@10", "p@30", "map"),
    "golden": (
        "first_recall@k",
        "first_mrr@k",
        "correct_refusal",
        "false_refusal",
        "e2e_accuracy",
        "faithfulness",
    ),
}
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
MAX_FAILURES = 5


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
    for rec in run.records:
        if rec.get("error"):
            run.errors += 1
            continue
        for k, v in (rec.get("judge_spread") or {}).items():
            spreads.setdefault(k, []).append(float(v))
        m = item_metrics(rec)
        run.pairs[str(rec["id"])] = m
        for k, p in m.items():
            if k.startswith("termination:"):
                run.terminations[k.split(":", 1)[1]] += 1
                continue
            sums.setdefault(k, []).append(p)
        if rec.get("mode") == "agent":
            for k, vs in ops_values(rec).items():
                values.setdefault(k, []).extend(vs)
            values.setdefault("steps_all", []).append(float(len(rec.get("trace") or [])))
    for k, ps in sums.items():
        run.metrics[k] = bootstrap_ci([p[0] for p in ps], [p[1] for p in ps], resamples=resamples)
    if values.get("latency_ms"):
        run.metrics["latency_p50"] = bootstrap_percentile(values["latency_ms"], 50, resamples=resamples)
        run.metrics["latency_p95"] = bootstrap_percentile(values["latency_ms"], 95, resamples=resamples)
        run.metrics["steps_p95"] = bootstrap_percentile(values["steps_all"], 95, resamples=resamples)
        if any(r.get("history") for r in run.records):
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
    pairs: list[tuple[str, str]] = []
    if "baseline" in configs:
        pairs += [("baseline", c) for c in configs if c != "baseline"]
    if "hybrid_rerank" in configs and "full" in configs:
        pairs.append(("hybrid_rerank", "full"))
    if "full" in configs:
        pairs += [("full", c) for c in configs if c.startswith("no_")]
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


# -- diagnosis of failures ----------------------------------------------------------------------------


def is_failure(rec: Mapping[str, Any]) -> bool:
    if rec.get("mode") != "agent" or rec.get("error"):
        return False
    acc = outcome_metrics(rec).get("e2e_accuracy")
    return acc is not None and acc[1] > 0 and acc[0] < 1.0


def diagnose(rec: Mapping[str, Any]) -> tuple[str, str]:
    """(label, explanation) of a failed item: grader false positive / false negative,
    retrieval miss, rewrite loop, critique miss, generation error (docs/metrics.md)."""
    v = ItemView(rec)
    gold_seen = [c for c in v.chunks if v.is_gold(c)]
    gold_kept = [c for c in gold_seen if v.chunks[c].get("grade") is not None and v.chunks[c]["grade"] >= v.tau_lower]
    rewrites = len(v.of("rewrite"))
    cycles = len(v.of("critique"))
    found = len(rec.get("deficiencies") or [])
    if v.should_refuse:
        best = max(
            ((c, float(x["grade"])) for c, x in v.chunks.items() if x.get("grade") is not None),
            key=lambda t: t[1],
            default=(None, 0.0),
        )
        note = f"; critique ran {cycles} cycle(s), found {found} deficiencies and did not stop it" if cycles else ""
        return (
            "grader false positive",
            f"should be refused, but the grader passed {best[0]} (grade {best[1]:.2f} >= tau_L {v.tau_lower}) "
            f"and an answer was generated from it{note}",
        )
    if rec.get("refused"):
        if v.rewrite_on and rewrites >= v.max_rewrites > 0 and not gold_seen:
            return (
                "rewrite loop",
                f"{rewrites} rewrites never retrieved a gold chunk; refused ({rec.get('termination_reason')})",
            )
        if not gold_seen:
            return "retrieval miss", f"no gold chunk among the {len(v.chunks)} retrieved; refused"
        if not gold_kept:
            grades = ", ".join(f"{c} {v.chunks[c].get('grade')}" for c in gold_seen[:3])
            return "grader false negative", f"gold retrieved but graded below tau_L {v.tau_lower} ({grades}); refused"
        return (
            "generation error",
            f"gold passed grading but the turn ended in a refusal ({rec.get('termination_reason')}): "
            "validation or critique rejected the drafts",
        )
    if not gold_seen:
        return "retrieval miss", f"answered from {len(v.chunks)} chunks, none of them gold"
    if not gold_kept:
        return "grader false negative", "gold retrieved but graded out; the answer came from other chunks"
    if cycles and not found:
        return "critique miss", "the answer is wrong and the critique found no deficiency"
    return "generation error", "gold passed grading, but the composed answer does not hold the gold answer"


def pick_failures(
    records: Sequence[dict[str, Any]], limit: int = MAX_FAILURES
) -> tuple[list[tuple[dict[str, Any], str, str]], Counter[str]]:
    by_label: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for rec in records:
        if is_failure(rec):
            label, why = diagnose(rec)
            by_label.setdefault(label, []).append((rec, why))
    counts = Counter({k: len(v) for k, v in by_label.items()})
    labels = [lab for lab, _ in counts.most_common()]
    picked: list[tuple[dict[str, Any], str, str]] = []
    i = 0
    while len(picked) < limit and any(i < len(by_label[lab]) for lab in labels):
        for lab in labels:
            if i < len(by_label[lab]) and len(picked) < limit:
                rec, why = by_label[lab][i]
                picked.append((rec, lab, why))
        i += 1
    return picked, counts


def render_trace(rec: Mapping[str, Any], max_lines: int = 24) -> str:
    v = ItemView(rec)
    lines = []
    for r in rec.get("trace") or []:
        node = r.get("node")
        d = r.get("detail") or {}
        extra = ""
        if node == "retrieve":
            ids = d.get("chunk_ids") or []
            marks = ["*" if v.is_gold(c) else "" for c in ids]
            extra = f" queries={d.get('queries')} chunks={[c + m for c, m in zip(ids, marks, strict=True)]}"
        elif node == "grade":
            top = sorted((d.get("scores") or {}).items(), key=lambda kv: -kv[1])[:3]
            extra = " scores=" + ", ".join(f"{c}{'*' if v.is_gold(c) else ''}:{s:.2f}" for c, s in top)
        elif node == "rewrite":
            extra = f" query={d.get('query')!r}"
        lines.append(f"{node}: {r.get('decision')}{extra} ({float(r.get('latency_ms') or 0):.0f} ms)")
    if len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], f"... {len(lines) - max_lines + 1} more steps"]
    return "\n".join(lines)


# -- formatting ---------------------------------------------------------------------------------------


def fmt_estimate(e: Estimate | None, kind: str) -> str:
    if e is None or e.n == 0 or math.isnan(e.value):
        return "—"
    if kind == "pct":
        return f"{100 * e.value:.1f}% [{100 * e.lo:.1f}, {100 * e.hi:.1f}]"
    if kind == "ms":
        return f"{e.value:.0f} [{e.lo:.0f}, {e.hi:.0f}]"
    if kind == "num1":
        return f"{e.value:.1f} [{e.lo:.1f}, {e.hi:.1f}]"
    return f"{e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}]"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def metrics_table(runs: Mapping[str, ConfigRun]) -> str:
    configs = _order(list(runs), CONFIG_ORDER)
    rows = []
    group = ""
    for key, label, grp, kind in METRICS:
        if not any(key in runs[c].metrics and runs[c].metrics[key].n > 0 for c in configs):
            continue
        if grp != group:
            rows.append([f"**{grp}**", *([""] * len(configs))])
            group = grp
        cells = []
        for c in configs:
            run = runs[c]
            cells.append("—" if run.not_applicable(key) else fmt_estimate(run.metrics.get(key), kind))
        rows.append([label, *cells])
    return _table(["Metric", *configs], rows)


def _pct(n: int, total: int) -> str:
    return f"{100 * n / total:.1f}%" if total else "—"


def termination_table(runs: Mapping[str, ConfigRun]) -> str:
    configs = _order(list(runs), CONFIG_ORDER)
    reasons = sorted({r for c in configs for r in runs[c].terminations})
    rows = []
    for reason in reasons:
        rows.append(
            [reason, *[_pct(runs[c].terminations[reason], sum(runs[c].terminations.values())) for c in configs]]
        )
    return _table(["Termination reason", *configs], rows)


def node_latency_table(runs: Mapping[str, ConfigRun]) -> str:
    configs = _order(list(runs), CONFIG_ORDER)
    nodes = sorted({k.split(":", 1)[1] for c in configs for k in runs[c].metrics if k.startswith("node_p50:")})
    rows = []
    for node in nodes:
        cells = []
        for c in configs:
            p50 = runs[c].metrics.get(f"node_p50:{node}")
            p95 = runs[c].metrics.get(f"node_p95:{node}")
            cells.append("—" if p50 is None or p95 is None else f"{p50.value:.1f} / {p95.value:.1f} (n={p50.n})")
        rows.append([node, *cells])
    return _table(["Node latency ms p50 / p95", *configs], rows)


def comparison_table(rows: Sequence[tuple[str, str, str, PairedTest]]) -> str:
    out = []
    for a, b, metric, t in rows:
        kind = FORMATS.get(metric, "num")
        scale = 100.0 if kind == "pct" else 1.0
        unit = " pp" if kind == "pct" else ""
        d = 1 if kind in ("pct", "ms") else 3
        sig = "**yes**" if t.significant else "no"
        out.append(
            [
                f"{b} − {a}",
                LABELS.get(metric, metric),
                f"{scale * t.diff:+.{d}f}{unit} [{scale * t.lo:+.{d}f}, {scale * t.hi:+.{d}f}]",
                f"{t.p_value:.4f}",
                sig,
                str(t.n),
            ]
        )
    return _table(["Comparison", "Metric", "Difference [95% CI]", "p (permutation)", "Significant", "Items"], out)


# -- charts -------------------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def chart_metrics(runs: Mapping[str, ConfigRun], suite: str, path: Path) -> Path | None:
    configs = _order(list(runs), CONFIG_ORDER)
    keys = [k for k in CHART_METRICS.get(suite, ()) if any(k in runs[c].metrics for c in configs)]
    if not keys:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(keys) * max(1, len(configs)) / 2), 4.8))
    width = 0.8 / max(1, len(configs))
    x = np.arange(len(keys))
    for i, c in enumerate(configs):
        vals, lo, hi = [], [], []
        for k in keys:
            e = runs[c].metrics.get(k)
            if e is None or e.n == 0 or runs[c].not_applicable(k):
                vals.append(np.nan)
                lo.append(0.0)
                hi.append(0.0)
            else:
                vals.append(e.value)
                lo.append(max(0.0, e.value - e.lo))
                hi.append(max(0.0, e.hi - e.value))
        ax.bar(x + (i - (len(configs) - 1) / 2) * width, vals, width, yerr=[lo, hi], capsize=2, label=c)
    ax.set_xticks(x)
    ax.set_xticklabels([LABELS.get(k, k).replace(" (", "\n(") for k in keys], fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("value (95% bootstrap CI)")
    ax.set_title(f"{SUITE_TITLES.get(suite, suite)}: metrics by config")
    ax.legend(fontsize=7, ncol=min(4, len(configs)))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def chart_latency(runs: Mapping[str, ConfigRun], suite: str, path: Path) -> Path | None:
    configs = _order(list(runs), CONFIG_ORDER)
    data = [
        [float(r.get("latency_ms") or 0.0) for r in runs[c].records if not r.get("error") and "latency_ms" in r]
        for c in configs
    ]
    if not any(data):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.boxplot([d or [np.nan] for d in data], showfliers=True, whis=(5, 95))
    ax.set_xticks(range(1, len(configs) + 1))
    ax.set_xticklabels(configs, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("end-to-end latency per query (ms, log)")
    ax.set_title(f"{SUITE_TITLES.get(suite, suite)}: latency distribution (whiskers p5/p95)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def refusal_curve(records: Sequence[Mapping[str, Any]], taus: Sequence[float]) -> tuple[list[float], list[float]]:
    """Precision and recall of "refuse iff max grade < tau" for each tau; positive = should be
    refused. Precision is NaN where nothing would be refused."""
    rows = [
        (bool(r.get("should_refuse")), ItemView(r).max_grade())
        for r in records
        if r.get("mode") == "agent" and not r.get("error") and r.get("kind") != "underspecified"
    ]
    positives = sum(p for p, _ in rows)
    prec, rec = [], []
    for tau in taus:
        refused = [(p, g is None or g < tau) for p, g in rows]
        tp = sum(p and f for p, f in refused)
        n_ref = sum(f for _, f in refused)
        prec.append(tp / n_ref if n_ref else math.nan)
        rec.append(tp / positives if positives else math.nan)
    return prec, rec


def chart_refusal(runs: Mapping[str, ConfigRun], suite: str, path: Path) -> Path | None:
    configs = _order(list(runs), CONFIG_ORDER)
    if not any(r.get("should_refuse") for c in configs for r in runs[c].records):
        return None
    taus = [i / 100 for i in range(101)]
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.4))
    for c in configs:
        prec, rec = refusal_curve(runs[c].records, taus)
        ax1.plot(taus, prec, label=f"{c} precision")
        ax1.plot(taus, rec, linestyle="--", label=f"{c} recall")
        line = ax2.plot(rec, prec, label=c)[0]
        actual = [r for r in runs[c].records if r.get("mode") == "agent" and not r.get("error")]
        refused = [r for r in actual if r.get("refused") and r.get("kind") != "underspecified"]
        pos = [r for r in actual if r.get("should_refuse")]
        if refused and pos:
            tp = sum(bool(r.get("should_refuse")) for r in refused)
            ax2.scatter([tp / len(pos)], [tp / len(refused)], color=line.get_color(), marker="o", zorder=3)
    ax1.set_xlabel("tau (refuse iff max grade < tau)")
    ax1.set_ylabel("refusal precision / recall")
    ax1.set_ylim(0, 1.02)
    ax1.legend(fontsize=6, ncol=2)
    ax1.set_title("over tau")
    ax2.set_xlabel("recall (unanswerable refused)")
    ax2.set_ylabel("precision (refusals that were right)")
    ax2.set_xlim(0, 1.02)
    ax2.set_ylim(0, 1.02)
    ax2.legend(fontsize=7)
    ax2.set_title("precision vs recall (dot: the graph's actual refusals)")
    fig.suptitle(f"{SUITE_TITLES.get(suite, suite)}: refusal curve from the max grade")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- writing ------------------------------------------------------------------------------------------


def _wall(run: ConfigRun) -> str:
    w = float(run.meta.get("wall_s") or 0.0)
    return f"{w / 60:.1f} min" if w >= 120 else f"{w:.0f} s"


def render_markdown(report: Report, charts: Mapping[str, list[Path]], out_dir: Path, title: str = "") -> str:
    lines = [f"# {title or 'Evaluation report'}", ""]
    for w in report.warnings:
        lines += [f"> **{w}**", ""]
    lines += [
        "Values are point estimates with percentile-bootstrap 95% intervals over items (1,000 resamples, "
        "fixed seed). A difference between two configs is called significant only when the paired "
        "permutation test on the same items gives p < 0.05. Metric definitions: docs/metrics.md. "
        "'—': not computed or not applicable for that config (e.g. grader metrics when the grading gate is open).",
        "",
    ]
    for suite in _order(list(report.suites), SUITE_ORDER):
        runs = report.suites[suite]
        configs = _order(list(runs), CONFIG_ORDER)
        any_meta = runs[configs[0]].meta
        lines += [f"## {SUITE_TITLES.get(suite, suite)}", "", str(any_meta.get("description") or ""), ""]
        run_rows = []
        for c in configs:
            r = runs[c]
            ids = r.meta.get("item_ids") or []
            done = len(done_ids(r.records))
            run_rows.append(
                [
                    c,
                    str(r.meta.get("version_id")),
                    f"{done}/{len(ids)}" + ("" if done == len(ids) else " (incomplete)"),
                    str(r.errors),
                    _wall(r),
                    str(r.meta.get("judge") or "—"),
                ]
            )
        lines += [_table(["Config", "Pipeline version", "Items done", "Errors", "Wall time", "Judge"], run_rows), ""]
        lines += [metrics_table(runs), ""]
        if any(runs[c].terminations for c in configs):
            lines += ["### Termination reasons", "", termination_table(runs), ""]
            lines += ["### Latency per node", "", node_latency_table(runs), ""]
        spread_rows = [
            [c, ", ".join(f"{LABELS.get(k, k)} {v:.4f}" for k, v in runs[c].judge_spread.items())]
            for c in configs
            if runs[c].judge_spread
        ]
        if spread_rows:
            lines += [
                f"### Judge spread over {runs[configs[0]].meta.get('judge_repeats')} repeats (mean max − min per item)",
                "",
                _table(["Config", "Spread"], spread_rows),
                "",
            ]
        if report.comparisons.get(suite):
            lines += ["### Paired comparisons (same items)", "", comparison_table(report.comparisons[suite]), ""]
        for p in charts.get(suite, []):
            lines += [f"![{p.stem}]({p.relative_to(out_dir).as_posix()})", ""]
        fail_lines = []
        for c in configs:
            r = runs[c]
            if not r.failures:
                continue
            counts = ", ".join(f"{k} {v}" for k, v in r.failure_counts.most_common())
            fail_lines += [f"#### {c} (all failures by diagnosis: {counts})", ""]
            for rec, label, why in r.failures:
                gold = ", ".join(rec.get("gold_docs") or rec.get("gold_chunks") or []) or "—"
                golds = "; ".join((rec.get("answers") or [])[:3]) or (rec.get("reference") or "")[:200]
                hist = f" (after {len(rec.get('history') or [])} earlier turns)" if rec.get("history") else ""
                fail_lines += [
                    f"- **{rec['id']}** [{rec.get('kind')}] {rec.get('question')}{hist}",
                    f"  - diagnosis: **{label}**: {why}",
                    f"  - gold: {gold}; expected: {golds or '—'}",
                    f"  - answer ({'refused' if rec.get('refused') else 'answered'}, "
                    f"{rec.get('termination_reason')}): {str(rec.get('answer') or '')[:300]!r}",
                    "",
                    "```text",
                    render_trace(rec),
                    "```",
                    "",
                ]
        if fail_lines:
            lines += ["### Failure cases (up to 5 per config; * marks a gold chunk)", "", *fail_lines]
    return "\n".join(lines).rstrip() + "\n"


def report_json(report: Report) -> dict[str, Any]:
    return {
        "warnings": report.warnings,
        "suites": {
            suite: {
                c: {
                    "meta": {k: v for k, v in run.meta.items() if k not in ("item_ids", "config")},
                    "config": run.meta.get("config"),
                    "errors": run.errors,
                    "metrics": {k: e.to_json() for k, e in sorted(run.metrics.items())},
                    "terminations": dict(run.terminations),
                    "failure_counts": dict(run.failure_counts),
                    "judge_spread": run.judge_spread,
                }
                for c, run in runs.items()
            }
            for suite, runs in report.suites.items()
        },
        "comparisons": {
            suite: [{"a": a, "b": b, "metric": m, **t.to_json()} for a, b, m, t in rows]
            for suite, rows in report.comparisons.items()
        },
    }


def write_report(report: Report, out_dir: Path, title: str = "", extra_markdown: str = "") -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    charts: dict[str, list[Path]] = {}
    for suite, runs in report.suites.items():
        made = [
            chart_metrics(runs, suite, out_dir / f"{suite}-metrics.png"),
            chart_latency(runs, suite, out_dir / f"{suite}-latency.png"),
            chart_refusal(runs, suite, out_dir / f"{suite}-refusal-curve.png"),
        ]
        charts[suite] = [p for p in made if p is not None]
    md = render_markdown(report, charts, out_dir, title)
    if extra_markdown:
        md = md.rstrip() + "\n\n" + extra_markdown.strip() + "\n"
    (out_dir / "report.md").write_text(md, encoding="utf-8")
    data = report_json(report)
    (out_dir / "report.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return {
        "report": str(out_dir / "report.md"),
        "json": str(out_dir / "report.json"),
        "charts": [str(p) for ps in charts.values() for p in ps],
        "warnings": report.warnings,
    }
