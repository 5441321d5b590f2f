"""The simulation's results as files: one JSON document (everything: every measurement with n and
CI, the paired tests, the audit timeline, cost), a Markdown note (the outcomes table, the learning
curves as tables, each arm's audit timeline) and a learning-curve chart per data set."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragloop.experiments.activation_audit import delta_text
from ragloop.improve.simulation.measure import HEADLINE, paired
from ragloop.improve.simulation.run import ArmResult, arm_json

PCT = {"e2e_accuracy", "correct_refusal", "false_refusal", "faithfulness", "context_recall"}


def _fmt(metric: str, e: Any) -> str:
    if e is None or e.n == 0 or math.isnan(e.value):
        return "–"
    if metric in PCT:
        return f"{100 * e.value:.1f}% [{100 * e.lo:.1f}, {100 * e.hi:.1f}] n={e.n}"
    return f"{e.value:.0f} [{e.lo:.0f}, {e.hi:.0f}] n={e.n}"


def paired_json(arm: ArmResult) -> dict[str, Any]:
    """Day-last vs day-0 on the same held-out items, per headline metric (latency has no pairs)."""
    if len(arm.measurements) < 2:
        return {}
    out: dict[str, Any] = {}
    for metric, _ in HEADLINE:
        t = paired(arm.measurements[0], arm.measurements[-1], metric)
        if t is not None:
            out[metric] = t.to_json()
    return out


SWITCHES = ("pipeline_activate", "pipeline_rollback")


def switch_effects(arm: ArmResult) -> list[dict[str, Any]]:
    """Each switch of the current version against what the held-out test measured around it: the last
    measurement before the switch vs the first one after it that the new version served alone, paired
    on the same items (e2e accuracy, correct and false refusal). The loop never sees these numbers;
    they are the ground truth its expected delta (and its own online actual delta) are read against."""
    out: list[dict[str, Any]] = []
    for a in arm.audit:
        if a["action"] not in SWITCHES or not a.get("version_before"):
            continue
        before = [m for m in arm.measurements if m.sim_time < a["at"]]
        after = [m for m in arm.measurements if m.sim_time >= a["at"] and set(m.versions) == {a["version_after"]}]
        if not before or not after:
            continue
        m0, m1 = before[-1], after[0]
        tests = {
            k: t.to_json() for k in ("e2e_accuracy", "correct_refusal", "false_refusal") if (t := paired(m0, m1, k))
        }
        out.append(
            {
                "at": a["at"],
                "action": a["action"],
                "version_before": a["version_before"],
                "version_after": a["version_after"],
                "from_day": m0.day,
                "to_day": m1.day,
                "expected_delta": a.get("expected_delta"),
                "heldout": tests,
            }
        )
    return out


def results_json(arms: Sequence[ArmResult], outcomes: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "meta": meta,
        "outcomes": outcomes,
        "arms": [
            arm_json(a) | {"paired_last_vs_day0": paired_json(a), "switch_effects": switch_effects(a)} for a in arms
        ],
    }


def _met(x: Any) -> str:
    return "–" if x is None else ("**met**" if x else "**missed**")


def outcomes_table(outcomes: dict[str, Any]) -> list[str]:
    lines = ["| # | data set | outcome | numbers | result |", "|---|---|---|---|---|"]
    for ds, o in outcomes.get("1", {}).items():
        p = o.get("paired") or {}
        nums = (
            f"day 0 {_pct(o['day0'])} → final {_pct(o['final'])}; paired Δ {_pct(p.get('diff'))} "
            f"[{_pct(p.get('lo'))}, {_pct(p.get('hi'))}] p={p.get('p_value', '–')} n={p.get('n', '–')}; "
            f"drops > 2 pt: {o['drops_over_2pt'] or 'none'}"
        )
        if "mtrag_baseline" in o:
            nums += f"; baseline {_pct(o['mtrag_baseline'])} reached: {o['reaches_baseline']}"
        lines.append(f"| 1 | {ds} | defaults: better on held-out, significant | {nums} | {_met(o['met'])} |")
    for ds, o in outcomes.get("2", {}).items():
        nums = (
            f"degraded day 0 {_pct(o['degraded_day0'])} → final {_pct(o['degraded_final'])}; defaults day 0 "
            f"{_pct(o['defaults_day0'])}; recovered {_pct(o['recovered_share'])} of the gap"
        )
        lines.append(f"| 2 | {ds} | degraded start: recover ≥ 50% of the gap | {nums} | {_met(o['met'])} |")
    for ds, o in outcomes.get("3", {}).items():
        nums = (
            f"day 0 {_pct(o['day0'])}; worst day {o['worst_day']} change {_pct(o['worst_change'])}; "
            f"attempted {o['attempted']}; stopped {o['stopped']}"
        )
        lines.append(f"| 3 | {ds} | 50% flipped: nothing ≥ 2 pt worse becomes current | {nums} | {_met(o['met'])} |")
    o4 = outcomes.get("4")
    if o4:
        lines.append(f"| 4 | {o4.get('dataset', '')} | vs offline optimum | {o4.get('summary', '')} | – |")
    o5 = outcomes.get("5")
    if o5:
        lines.append(f"| 5 | all | cost | {o5} | – |")
    return lines


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * float(x):.1f}%"


def arm_section(arm: ArmResult) -> list[str]:
    c = arm.config
    lines = [
        f"### {c.label}: {c.dataset}, start {c.start}, {int(100 * c.users.flip_share)}% of ratings flipped",
        "",
        f"Split: {arm.split}.",
        "",
        "| day | sim time | versions | " + " | ".join(label for _, label in HEADLINE) + " |",
        "|---|---|---|" + "---|" * len(HEADLINE),
    ]
    for m in arm.measurements:
        cells = " | ".join(_fmt(k, m.metrics.get(k)) for k, _ in HEADLINE)
        lines.append(f"| {m.day} | {m.sim_time} | {', '.join(m.versions)} | {cells} |")
    pj = paired_json(arm)
    if pj:
        lines += ["", "Paired, last day − day 0 on the same held-out items (bootstrap 95% CI, permutation p):", ""]
        for metric, t in pj.items():
            lines.append(
                f"- {metric}: Δ {t['diff']:+.4f} [{t['lo']:+.4f}, {t['hi']:+.4f}], p = {t['p_value']}, n = {t['n']}"
            )
    lines += ["", "Traffic per day: " + "; ".join(_day(d) for d in arm.days), ""]
    lines.append(f"Users: {arm.users}. Cost: {arm.cost}.")
    lines += ["", "Audit timeline (every change the loop made, from the audit log):", ""]
    lines += ["| sim time | action | triggered by | versions | expected Δ | actual Δ |", "|---|---|---|---|---|---|"]
    for run in audit_runs(arm.audit):
        a, last = run[0], run[-1]
        versions = f"{a['version_before'] or ''} → {a['version_after'] or ''}".strip(" →")
        at, action = (
            (a["at"], a["action"]) if len(run) == 1 else (f"{a['at']} … {last['at']}", f"{a['action']} ×{len(run)}")
        )
        lines.append(
            f"| {at} | {action} | {str(a['triggered_by'])[:60]} | {versions} | "
            f"{_short(a['expected_delta'])} | {_short(a['actual_delta'])} |"
        )
    if not arm.audit:
        lines.append("| – | no entries | | | | |")
    effects = switch_effects(arm)
    if effects:
        lines += [
            "",
            "Each switch, expected (its evidence) vs measured on the held-out test (paired, the day before",
            "vs the first day the new version served alone; the loop never sees these):",
            "",
        ]
        lines += [
            "| sim time | switch | expected Δ | held-out Δ e2e accuracy | correct refusal | false refusal |",
            "|---|---|---|---|---|---|",
        ]
        for e in effects:
            exp = e["expected_delta"] or {}
            ci = exp.get("ci95") or [None, None]
            expected = (
                f"{exp.get('metric')} {_pt(exp.get('value'))} [{_pt(ci[0], '')}, {_pt(ci[1], '')}] n={exp.get('n')}"
                if exp.get("value") is not None
                else "–"
            )
            held = [_paired_cell(e["heldout"].get(k)) for k in ("e2e_accuracy", "correct_refusal", "false_refusal")]
            lines.append(
                f"| {e['at']} | {e['version_before']} → {e['version_after']} (day {e['from_day']} → {e['to_day']}) | "
                f"{expected} | " + " | ".join(held) + " |"
            )
    return [*lines, ""]


def audit_runs(audit: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive entries of one action from one trigger that switch no version and carry no delta
    (the seeded golden set: a row per entry buried the week's changes) as one run; others alone."""

    def key(a: dict[str, Any]) -> tuple[Any, Any] | None:
        changes = a["version_before"] or a["version_after"] or a["expected_delta"] or a["actual_delta"]
        return None if changes else (a["action"], a["triggered_by"])

    runs: list[list[dict[str, Any]]] = []
    for a in audit:
        if runs and key(a) is not None and key(a) == key(runs[-1][-1]):
            runs[-1].append(a)
        else:
            runs.append([a])
    return runs


def _pt(x: Any, unit: str = " pt") -> str:
    return "–" if x is None else f"{100 * float(x):+.1f}{unit}"


def _paired_cell(t: dict[str, Any] | None) -> str:
    if not t:
        return "–"
    return f"{_pt(t['diff'])} [{_pt(t['lo'], '')}, {_pt(t['hi'], '')}] n={t['n']}"


def _day(d: dict[str, Any]) -> str:
    return (
        f"day {d['day']}: {d['turns']} turns ({d['graded']} graded), {d['feedback']} ratings "
        f"({d['feedback_negative']} negative), {d['reviews']} reviews, late {d['late_s']} s"
    )


def _short(x: Any) -> str:
    """An audit entry's delta: `metric value [lo, hi] n=` when it is one measured difference."""
    if not x:
        return ""
    if isinstance(x, dict) and (one := delta_text(x)) is not None:
        return one
    text = json.dumps(x, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def chart(arms: Sequence[ArmResult], dataset: str, path: Path) -> Path | None:
    """Learning curve: held-out e2e accuracy with its 95% CI by simulated day, one line per arm."""
    mine = [a for a in arms if a.config.dataset == dataset and a.measurements]
    if not mine:
        return None
    from ragloop.evaluation.charts import _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for a in mine:
        pts = [(m.day, e) for m in a.measurements if (e := m.metrics.get("e2e_accuracy")) is not None and e.n]
        if not pts:
            continue
        days = [d for d, _ in pts]
        ax.plot(days, [e.value for _, e in pts], marker="o", label=a.config.label)
        ax.fill_between(days, [e.lo for _, e in pts], [e.hi for _, e in pts], alpha=0.15)
    ax.set_xlabel("simulated day (0 = before any traffic)")
    ax.set_ylabel("held-out end-to-end accuracy (95% CI)")
    ax.set_title(f"{dataset}: held-out accuracy while the loop runs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(
    arms: Sequence[ArmResult], outcomes: dict[str, Any], meta: dict[str, Any], out_dir: Path, name: str
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    doc = results_json(arms, outcomes, meta)
    jp = out_dir / f"{name}.json"
    _atomic(jp, json.dumps(doc, indent=1, default=str))
    written.append(jp)
    for ds in sorted({a.config.dataset for a in arms}):
        p = chart(arms, ds, out_dir / f"{name}-{ds}-learning-curve.png")
        if p is not None:
            written.append(p)
    md = [f"# Self-improvement simulation: {name}", "", f"Command: `{meta.get('command', '')}`", ""]
    md += [f"- {k}: {v}" for k, v in meta.items() if k != "command"]
    md += ["", "## Outcomes", "", *outcomes_table(outcomes), "", "## Arms", ""]
    for a in arms:
        md += arm_section(a)
    md += [f"![{p.stem}]({p.name})" for p in written if p.suffix == ".png"]
    mp = out_dir / f"{name}.md"
    _atomic(mp, "\n".join(md) + "\n")
    written.append(mp)
    return written


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_outcome_4(json_path: Path, o4: dict[str, Any]) -> None:
    """Outcome 4 into finished results (it is measured after the simulation, by `ragloop improve
    optimum`): the JSON's `outcomes["4"]` and the Markdown's outcome row (replaced or inserted
    before row 5), leaving every other number of the run as it was."""
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    doc.setdefault("outcomes", {})["4"] = o4
    json_path.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    md_path = json_path.with_suffix(".md")
    if not md_path.exists():
        return
    row = outcomes_table({"4": o4})[-1]
    lines = md_path.read_text(encoding="utf-8").split("\n")
    # only the outcomes table: the arms' day tables below have rows "| 4 |" and "| 5 |" too
    start = lines.index("## Outcomes") if "## Outcomes" in lines else 0
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = [ln for ln in lines[start:end] if not ln.startswith("| 4 |")]
    rows = [i for i, ln in enumerate(section) if ln.startswith("| ") and ln[2:3].isdigit()]
    at = next((i for i in rows if section[i].startswith("| 5 |")), rows[-1] + 1 if rows else len(section))
    section.insert(at, row)
    md_path.write_text("\n".join(lines[:start] + section + lines[end:]), encoding="utf-8")
