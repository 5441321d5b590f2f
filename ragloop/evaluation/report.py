"""Reports: Markdown tables (configs x metrics with 95% intervals), paired comparisons, PNG
charts and failure cases with their traces and a diagnosis.

    report = build_report(runs_dir)          # reads <runs_dir>/<suite>/<config>/{items.jsonl,run.json}
    write_report(report, out_dir)            # report.md, report.json, <suite>-*.png

Charts use matplotlib's Agg backend (no display needed): metric bars with error bars, the
end-to-end latency distribution per config, and the refusal precision/recall curve over tau
(refuse iff the item's max grade < tau; positive class = items that should be refused).

This module renders the Markdown and JSON and is the import path for the whole API; the parts live in
`summary` (runs, estimates, comparisons), `charts` (PNGs) and `failures` (diagnosis of failed items).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragloop.evaluation.charts import chart_latency, chart_metrics, chart_refusal, refusal_curve
from ragloop.evaluation.failures import diagnose, is_failure, render_trace
from ragloop.evaluation.records import ResultRecord
from ragloop.evaluation.runner import done_ids
from ragloop.evaluation.stats import Estimate, PairedTest
from ragloop.evaluation.summary import (
    CONFIG_ORDER,
    FORMATS,
    LABELS,
    METRICS,
    SUITE_ORDER,
    SUITE_TITLES,
    ConfigRun,
    Report,
    _order,
    build_report,
)

# Callers import the whole reporting API from here; the parts live in `summary`, `charts`, `failures`.
__all__ = [
    "ConfigRun",
    "Report",
    "build_report",
    "comparison_table",
    "diagnose",
    "fmt_estimate",
    "is_failure",
    "metrics_table",
    "node_latency_table",
    "refusal_curve",
    "render_markdown",
    "report_json",
    "termination_table",
    "write_report",
]


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
            for raw, label, why in r.failures:
                rec = ResultRecord.load(raw)
                gold = ", ".join(rec.gold_docs or rec.gold_chunks) or "—"
                golds = "; ".join(rec.answers[:3]) or rec.reference[:200]
                hist = f" (after {len(rec.history)} earlier turns)" if rec.history else ""
                fail_lines += [
                    f"- **{rec.id}** [{rec.kind}] {rec.question}{hist}",
                    f"  - diagnosis: **{label}**: {why}",
                    f"  - gold: {gold}; expected: {golds or '—'}",
                    f"  - answer ({'refused' if rec.refused else 'answered'}, "
                    f"{rec.termination_reason}): {rec.answer[:300]!r}",
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
