"""The regression runs as a report: per run and metric the mean with n and a 95% interval, the
baseline it was compared with and the paired difference's interval; Markdown and a PNG chart.

Why a separate module: `regression.py` decides (and must stay free of matplotlib); this one
only reads `regression_runs` and renders. The data shape (`RegressionHistory.to_json`) is what
`ragloop regress report --json` and `GET /v1/regression/runs` return and what the admin pages
draw, so it is kept stable: add keys, never rename them.

The chart plots, per metric, each run's mean with its 95% interval against the baseline's mean
and the band `baseline × (1 − threshold)` (the 2% line a drop must cross); points of a run whose
paired comparison found a regression on that metric are drawn red. A metric's interval is the
t-interval over the run's per-entry scores (`report.items`), so a reader sees how much a mean
over 30 golden entries can move on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ragloop.experiments._tdist import t_critical
from ragloop.experiments.regression import METRICS, THRESHOLD

if TYPE_CHECKING:
    from ragloop.store import RegressionRun, Store


@dataclass(frozen=True)
class MetricSummary:
    """One metric of one run: mean over the entries that had it, with n and a 95% t-interval."""

    metric: str
    n: int
    mean: float | None
    ci95: tuple[float, float] | None

    @classmethod
    def of(cls, metric: str, values: list[float]) -> MetricSummary:
        n = len(values)
        if n == 0:
            return cls(metric, 0, None, None)
        x = np.asarray(values, dtype=np.float64)
        mean = float(x.mean())
        if n < 2:
            return cls(metric, n, mean, None)
        half = t_critical(0.05, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
        return cls(metric, n, mean, (max(0.0, mean - half), min(1.0, mean + half)))

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "n": self.n,
            "mean": None if self.mean is None else round(self.mean, 6),
            "ci95": None if self.ci95 is None else [round(self.ci95[0], 6), round(self.ci95[1], 6)],
        }


@dataclass
class RunSummary:
    run_id: str
    started_at: str | None
    completed_at: str | None
    pipeline_version: str
    golden_set_version: int
    run_status: str
    regression_detected: bool
    rollback_triggered: bool
    baseline_run_id: str | None
    entries: int
    errors: int
    metrics: dict[str, MetricSummary] = field(default_factory=dict)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    """`regression.MetricComparison.to_json()` per metric (paired difference vs the baseline)."""

    @property
    def regressed_metrics(self) -> list[str]:
        return [c["metric"] for c in self.comparisons if c.get("regressed")]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
            "pipeline_version": self.pipeline_version,
            "golden_set_version": self.golden_set_version,
            "run_status": self.run_status,
            "regression_detected": self.regression_detected,
            "rollback_triggered": self.rollback_triggered,
            "baseline_run_id": self.baseline_run_id,
            "entries": self.entries,
            "errors": self.errors,
            "metrics": {m: s.to_json() for m, s in self.metrics.items()},
            "comparisons": self.comparisons,
            "regressed_metrics": self.regressed_metrics,
        }


@dataclass
class RegressionHistory:
    """Runs oldest first, the threshold they were judged with."""

    runs: list[RunSummary]
    threshold: float = THRESHOLD

    def to_json(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "metrics": list(METRICS),
            "runs": [r.to_json() for r in self.runs],
        }


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def summarize_run(run: RegressionRun) -> RunSummary:
    report = dict(run.report or {})
    items: dict[str, dict[str, float]] = dict(report.get("items") or {})
    metrics = {m: MetricSummary.of(m, [float(s[m]) for s in items.values() if m in s]) for m in METRICS}
    return RunSummary(
        run_id=run.run_id,
        started_at=_iso(run.started_at),
        completed_at=_iso(run.completed_at),
        pipeline_version=run.pipeline_version,
        golden_set_version=run.golden_set_version,
        run_status=run.run_status,
        regression_detected=bool(run.regression_detected),
        rollback_triggered=bool(run.rollback_triggered),
        baseline_run_id=report.get("baseline_run_id"),
        entries=len(items) + len(report.get("errors") or {}),
        errors=len(report.get("errors") or {}),
        metrics=metrics,
        comparisons=list(report.get("comparisons") or []),
    )


def regression_history(store: Store, *, limit: int = 50) -> RegressionHistory:
    """The latest `limit` runs, oldest first."""
    runs = [summarize_run(r) for r in store.regressions.list_runs(limit=limit)]
    runs.sort(key=lambda r: r.started_at or "")
    return RegressionHistory(runs)


def _fmt_ci(s: MetricSummary) -> str:
    if s.mean is None:
        return "–"
    ci = f" [{s.ci95[0]:.3f}, {s.ci95[1]:.3f}]" if s.ci95 else ""
    return f"{s.mean:.3f}{ci} (n={s.n})"


def render_markdown(history: RegressionHistory, chart: str | None = None) -> str:
    lines = [
        "# Golden-set regression runs",
        "",
        f"A run regresses when a metric's paired difference against the baseline run drops by more than "
        f"{history.threshold:.0%} of the baseline mean *and* its 95% interval lies below 0; "
        "a regression rolls the pipeline back to the baseline's version. Means carry n and a 95% t-interval.",
        "",
    ]
    if chart:
        lines += [f"![metric trend]({chart})", ""]
    if not history.runs:
        return "\n".join([*lines, "No regression runs yet (`ragloop regress`)."]) + "\n"
    head = ["run", "started", "version", "status", "regression", "rollback", *METRICS]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reversed(history.runs):
        cells = [
            r.run_id[:12],
            (r.started_at or "")[:19],
            r.pipeline_version,
            r.run_status,
            ("**yes**: " + ", ".join(r.regressed_metrics)) if r.regression_detected else "no",
            "yes" if r.rollback_triggered else "no",
            *[_fmt_ci(r.metrics[m]) for m in METRICS],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Comparisons with the baseline (paired, per entry)", ""]
    head2 = [
        "run",
        "baseline run",
        "metric",
        "n",
        "baseline",
        "current",
        "difference [95% CI]",
        "relative",
        "worse / better",
        "regressed",
    ]
    lines += ["| " + " | ".join(head2) + " |", "|" + "---|" * len(head2)]
    for r in reversed(history.runs):
        for c in r.comparisons:
            lo, hi = c["ci95"]
            lines.append(
                "| "
                + " | ".join(
                    [
                        r.run_id[:12],
                        (r.baseline_run_id or "")[:12],
                        c["metric"],
                        str(c["n"]),
                        f"{c['baseline_mean']:.3f}",
                        f"{c['current_mean']:.3f}",
                        f"{c['difference']:+.3f} [{lo:+.3f}, {hi:+.3f}]",
                        f"{c['relative_change']:+.1%}" if math.isfinite(c["relative_change"]) else "–",
                        f"{c['worse']} / {c['better']}" if "worse" in c else "–",  # runs before the counts: none
                        "**yes**" if c["regressed"] else "no",
                    ]
                )
                + " |"
            )
    return "\n".join(lines) + "\n"


def render_chart(history: RegressionHistory, path: Path) -> Path | None:
    """One panel per metric: run means with 95% intervals, the baseline and its 2% band."""
    if not history.runs:
        return None
    from ragloop.evaluation.charts import _plt

    plt = _plt()
    fig, axes = plt.subplots(len(METRICS), 1, figsize=(8, 2.6 * len(METRICS)), sharex=True, squeeze=False)
    xs = list(range(len(history.runs)))
    for ax, metric in zip(axes[:, 0], METRICS, strict=True):
        for x, run in zip(xs, history.runs, strict=True):
            s = run.metrics[metric]
            if s.mean is None:
                continue
            bad = metric in run.regressed_metrics
            lo, hi = s.ci95 if s.ci95 else (s.mean, s.mean)
            ax.errorbar(
                [x],
                [s.mean],
                yerr=[[s.mean - lo], [hi - s.mean]],
                fmt="o",
                color="#c62828" if bad else "#1565c0",
                capsize=3,
                markersize=7 if bad else 5,
            )
            cmp = next((c for c in run.comparisons if c["metric"] == metric), None)
            if cmp is not None:
                base = cmp["baseline_mean"]
                ax.hlines(base, x - 0.4, x + 0.4, colors="#555555", linestyles="solid", linewidth=1)
                ax.fill_between(
                    [x - 0.4, x + 0.4], base * (1 - history.threshold), base, color="#9e9e9e", alpha=0.3, linewidth=0
                )
        ax.set_ylabel(metric)
        ax.set_ylim(-0.05, 1.05)
        ax.grid(axis="y", alpha=0.3)
    axes[-1, 0].set_xticks(xs, [f"{r.run_id[:6]}\n{r.pipeline_version[:10]}" for r in history.runs], fontsize=7)
    fig.suptitle(
        "Golden-set regression runs: mean ± 95% CI; "
        f"grey = baseline and its {history.threshold:.0%} band; red = regressed",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


def write_report(history: RegressionHistory, out_dir: Path) -> dict[str, str]:
    """regression.md, regression.json and (matplotlib installed) regression.png, written atomically."""
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    chart: Path | None
    try:
        chart = render_chart(history, out_dir / "regression.png")
    except ImportError:
        chart = None
    files = {"markdown": out_dir / "regression.md", "json": out_dir / "regression.json"}
    for key, text in (
        ("markdown", render_markdown(history, chart.name if chart else None)),
        ("json", json.dumps(history.to_json(), indent=2) + "\n"),
    ):
        tmp = files[key].with_suffix(files[key].suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(files[key])
    out = {k: str(v) for k, v in files.items()}
    if chart:
        out["chart"] = str(chart)
    return out
