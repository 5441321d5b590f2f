"""Issue 12's scenario as a thin variant of the self-improvement simulation: SQuAD 2.0 from the
degraded start (dense-only, top-k 2, chunk size 200), replayed through the real service, with the
held-out part measured before and after; failures before/after by label (the evaluation's
diagnosis labels on the held-out records) and by the loop's own failure modes (its diagnoses of
traffic), with every audit entry.

    PYTHONPATH=. .venv/bin/python benchmarks/improve_scenario.py [--days 3 --day-minutes 1.5]

Writes benchmarks/results/improve_scenario.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from _common import BENCH_HOME, machine, write_results

from ragloop.improve.simulation.plan import default_users
from ragloop.improve.simulation.report import arm_section, paired_json
from ragloop.improve.simulation.run import ArmConfig, arm_json, run_arm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=3)
    ap.add_argument("--day-minutes", type=float, default=1.5)
    ap.add_argument("--traffic-per-day", type=int, default=80)
    ap.add_argument("--heldout", type=int, default=150)
    args = ap.parse_args()
    cfg = ArmConfig(
        label="squad-degraded-scenario",
        dataset="squad",
        start="degraded",
        days=args.days,
        day_minutes=args.day_minutes,
        traffic_per_day=args.traffic_per_day,
        heldout=args.heldout,
        users=default_users(0.30, 0.10, 20),
    )
    arm = run_arm(cfg, BENCH_HOME / "improve_scenario", log=lambda m: print(m, flush=True))
    first, last = arm.measurements[0].run.failure_counts, arm.measurements[-1].run.failure_counts
    rows = [f"| {lab} | {first.get(lab, 0)} | {last.get(lab, 0)} |" for lab in sorted(set(first) | set(last))]
    command = "PYTHONPATH=. .venv/bin/python benchmarks/improve_scenario.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    md = [
        "# Improvement scenario: SQuAD 2.0 from a degraded start",
        "",
        f"Command: `{command}`",
        "",
        f"Held-out failures by label (docs/metrics.md), day 0 → day {arm.measurements[-1].day}:",
        "",
        "| label | day 0 | last day |",
        "|---|---|---|",
        *rows,
        "",
        f"The loop's diagnoses of traffic by failure mode: {arm.cost.get('failure_modes')}; "
        f"diagnoses by status: {arm.cost.get('diagnoses')}; actions: {arm.cost.get('improvement_actions')}.",
        "",
        *arm_section(arm),
    ]
    payload = {"machine": machine(), "command": command, "arm": arm_json(arm), "paired": paired_json(arm)}
    write_results("improve_scenario", json.loads(json.dumps(payload, default=str)), "\n".join(md))


if __name__ == "__main__":
    main()
