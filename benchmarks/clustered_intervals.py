"""How often an A/A comparison of two windows of live answers looks "significant": Welch's interval
on answers read as independent against the session-clustered one (`ArmSummary.clustered`), on the
answers a whole simulation run really served.

    PYTHONPATH=. .venv/bin/python benchmarks/self_improvement.py ... --name NAME   # leaves its stores
    PYTHONPATH=. .venv/bin/python benchmarks/clustered_intervals.py --trials 4000

Per arm of that run (its store under `--work`, where `benchmarks/self_improvement.py` leaves each
arm's home), the answers of the version that served the most are pooled by session. Each trial
draws two disjoint windows of `--sessions` sessions from the pool (the activation audit's before
and after windows hold the whole sessions served in a simulated day: ~40 conversations on MTRAG-UN,
~14 article sessions on SQuAD 2.0) and compares each of the audit's per-answer metrics (tier-1 score,
refusal rate) between them with both 95% intervals. Both windows come from one version, so an
interval that excludes 0 is a false alarm; a valid one does so in about 5% of trials.

Reported per arm and metric: each interval's false-alarm rate with its Wilson 95% interval, the
design effect (clustered over independent variance of the mean, median over trials), and the
pool's answers and sessions. No model runs: it reads the stores.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from _common import BENCH_HOME, machine, print_table, write_results
from sqlalchemy import func, select

from ragloop.experiments.metrics import Metric
from ragloop.experiments.scores import answer_scores
from ragloop.experiments.stats import ArmSummary, welch
from ragloop.store import Store

METRICS = (Metric.TIER1_SCORE, Metric.REFUSAL_RATE)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)


def pool(db: Path) -> tuple[str, dict[Metric, dict[str, list[float]]]]:
    """The most-served version of a store and, per metric, its scores by session."""
    from ragloop.store.models import Answer

    with Store.open(f"sqlite:///{db}", migrate=False) as store:
        with store.db.transaction(write=False) as s:
            version = s.execute(
                select(Answer.pipeline_version).group_by(Answer.pipeline_version).order_by(func.count().desc()).limit(1)
            ).scalar_one()
        arm = answer_scores(store, (Answer.pipeline_version == version,), lambda _variant: "all")["all"]
    by_session: dict[Metric, dict[str, list[float]]] = {}
    for metric in METRICS:
        groups: dict[str, list[float]] = defaultdict(list)
        for value, session in zip(arm.scores[metric], arm.sessions[metric], strict=True):
            groups[session].append(value)
        by_session[metric] = dict(groups)
    return version, by_session


def trials(sessions: dict[str, list[float]], per_window: int, n: int, rng: np.random.Generator) -> dict[str, Any]:
    names = sorted(sessions)
    per_window = min(per_window, len(names) // 2)
    alarms = {"independent": 0, "clustered": 0}
    deff: list[float] = []
    for _ in range(n):
        drawn = rng.permutation(len(names))[: 2 * per_window]
        arms: dict[str, list[ArmSummary]] = {"independent": [], "clustered": []}
        for window in (drawn[:per_window], drawn[per_window:]):
            x = [v for i in window for v in sessions[names[i]]]
            units = [names[i] for i in window for _ in sessions[names[i]]]
            plain, clustered = ArmSummary.of(x), ArmSummary.clustered(x, units)
            arms["independent"].append(plain)
            arms["clustered"].append(clustered)
            if plain.variance > 0:
                deff.append(clustered.variance / plain.variance)
        for kind, (before, after) in arms.items():
            ci = welch(before, after).ci
            alarms[kind] += int(ci.lo > 0 or ci.hi < 0)
    out: dict[str, Any] = {
        "answers": sum(len(v) for v in sessions.values()),
        "sessions": len(names),
        "sessions_per_window": per_window,
        "design_effect_median": round(float(np.median(deff)), 3) if deff else None,
    }
    for kind, k in alarms.items():
        lo, hi = wilson(k, n)
        out[kind] = {"false_alarms": k, "rate": round(k / n, 4), "ci95": [round(lo, 4), round(hi, 4)]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=BENCH_HOME / "self_improvement")
    ap.add_argument("--arms", default="mtrag-defaults,mtrag-degraded,mtrag-adversarial,squad-defaults,squad-degraded")
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    results: dict[str, object] = {}
    rows = []
    for label in args.arms.split(","):
        db = args.work / label / "home" / "ragloop.db"
        if not db.exists():
            raise SystemExit(f"no store at {db}: run benchmarks/self_improvement.py first (it leaves each arm's home)")
        version, by_session = pool(db)
        per_window = 40 if label.startswith("mtrag") else 14
        arm: dict[str, object] = {"version": version}
        for metric in METRICS:
            r = trials(by_session[metric], per_window, args.trials, rng)
            arm[metric.value] = r
            for kind in ("independent", "clustered"):
                k = r[kind]
                rows.append(
                    [
                        label,
                        metric.value,
                        f"{r['answers']} / {r['sessions']} ({r['sessions_per_window']} a window)",
                        kind,
                        f"{k['rate']:.1%} [{k['ci95'][0]:.1%}, {k['ci95'][1]:.1%}]",
                        r["design_effect_median"],
                    ]
                )
        results[label] = arm
    command = "PYTHONPATH=. .venv/bin/python benchmarks/clustered_intervals.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    doc = {"command": command, "machine": machine(), "trials": args.trials, "results": results}
    table = print_table(
        f"A/A false alarms of a 95% interval ({args.trials} trials a row; 5% is valid)",
        ["arm", "metric", "answers / sessions", "interval", "excludes 0 (Wilson 95%)", "design effect"],
        rows,
    )
    md = "\n".join(
        [
            "# Session-clustered intervals: A/A windows of the answers one version served",
            "",
            f"Command: `{command}`",
            "",
            f"- machine: {doc['machine']}",
            f"- stores: `{os.path.relpath(args.work)}` (the whole run's arm homes)",
            "",
            table,
        ]
    )
    write_results("clustered_intervals", doc, md)


if __name__ == "__main__":
    main()
