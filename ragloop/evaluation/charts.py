"""PNG charts for the report: metric bars with error bars, the latency distribution, and the refusal
precision/recall curve over tau. Apart from the Markdown and JSON rendering because this is the only
part that needs matplotlib (Agg backend, imported on first use)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragloop.evaluation.metrics.agent import ItemView
from ragloop.evaluation.records import ResultRecord
from ragloop.evaluation.summary import CONFIG_ORDER, LABELS, SUITE_TITLES, ConfigRun, _order

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
        [
            r.latency_ms
            for r in map(ResultRecord.load, runs[c].records)
            if not r.error and "latency_ms" in r.model_fields_set
        ]
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


def refusal_curve(
    records: Sequence[Mapping[str, Any] | ResultRecord], taus: Sequence[float]
) -> tuple[list[float], list[float]]:
    """Precision and recall of "refuse iff max grade < tau" for each tau; positive = should be
    refused. Precision is NaN where nothing would be refused."""
    rows = [
        (r.should_refuse, ItemView(r).max_grade())
        for r in map(ResultRecord.load, records)
        if r.mode == "agent" and not r.error and r.kind != "underspecified"
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
    if not any(ResultRecord.load(r).should_refuse for c in configs for r in runs[c].records):
        return None
    taus = [i / 100 for i in range(101)]
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.4))
    for c in configs:
        prec, rec = refusal_curve(runs[c].records, taus)
        ax1.plot(taus, prec, label=f"{c} precision")
        ax1.plot(taus, rec, linestyle="--", label=f"{c} recall")
        line = ax2.plot(rec, prec, label=c)[0]
        actual = [r for r in map(ResultRecord.load, runs[c].records) if r.mode == "agent" and not r.error]
        refused = [r for r in actual if r.refused and r.kind != "underspecified"]
        pos = [r for r in actual if r.should_refuse]
        if refused and pos:
            tp = sum(r.should_refuse for r in refused)
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
