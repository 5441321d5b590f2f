"""Simulation study of the experiment promotion rule under continuous monitoring (issue 13).

    .venv/bin/python benchmarks/experiments_sim.py                      # ~5 min on 2 busy cores
    .venv/bin/python benchmarks/experiments_sim.py --traffic 2000 --experiments 300   # quick look
    .venv/bin/python benchmarks/experiments_sim.py --replay-only    # real score streams only (~3 min)

Each simulated experiment is 7 days of traffic looked at after every 5-minute aggregation (2,016
looks), 5% of queries to treatment, Beta-distributed scores (sd 0.2) around a control mean of 0.7
that swings ±0.05 through the day for both arms, traffic that swings ±50% through the day
(`ragloop.experiments.simulation` has the model). The promotion rule is the service's: at least
24 h, at least 500 scores per arm, always-valid p < 0.05, difference ≥ 0.02. Beside it:
the same rule with the lower bound of the confidence sequence ≥ 0.02 (`strict`), with Welch's p
at every look (`welch, every look, gated`), the plain repeated t-test (p < 0.05 with a positive
difference at any look), and one Welch test at day 7 (the fixed-horizon baseline). Guardrail
rows apply the guardrail rule (always-valid p < 0.05 on the harmful side, point regression > 2%
of control) to treatments 2% and 5% worse. Rates carry Wilson 95% intervals; decision times are
medians over the experiments that decided.

Replay of real score streams (`--replay`, on by default when the file exists): the tier-1 scores
that pipeline variants earned on SQuAD 2.0 dev + MTRAG-UN dev questions (the offline answer graph,
written by `benchmarks/experiments_scenario.py` into benchmarks/results/experiments_scenario.json)
are resampled into the same week-long streams (`simulation.simulate_resampled`): each query's
score is a draw from its arm's real pool, with its refusals at 0, skew and ties. False promotions
when both arms serve the same pipeline (the default against itself, and against a no-op copy of
itself with another config hash) and power when they differ (dense-only top-k 2 as control, the
default hybrid as treatment); the mixture is tuned to the pools' pooled sd. With `--replay-only`
the replay alone is written to benchmarks/results/experiments_sim_replay.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from _common import machine, print_table, timed, write_results

from ragloop.experiments.simulation import Rule, ScenarioResult, SimulationPlan, replay_plan, run_scenario

REPLAY = Path(__file__).resolve().parent / "results" / "experiments_scenario.json"
REPLAY_PAIRS = (
    ("hybrid", "hybrid", "same pipeline in both arms"),
    ("hybrid", "hybrid_noop", "no-op copy (another hash, same answers)"),
    ("dense_k2", "hybrid", "dense-only top-k 2 vs default hybrid"),
)

PROMOTION_RULES = (
    Rule.ALWAYS_VALID,
    Rule.ALWAYS_VALID_STRICT,
    Rule.ALWAYS_VALID_ANY_EFFECT,
    Rule.WELCH_EVERY_LOOK_GATED,
    Rule.WELCH_EVERY_LOOK_ANY_EFFECT,
    Rule.WELCH_EVERY_LOOK,
    Rule.WELCH_FIXED_HORIZON,
)
LABELS = {
    Rule.ALWAYS_VALID: "always-valid rule (ours)",
    Rule.ALWAYS_VALID_STRICT: "always-valid, lower bound >= min effect",
    Rule.ALWAYS_VALID_ANY_EFFECT: "always-valid, any positive difference",
    Rule.WELCH_EVERY_LOOK_GATED: "Welch at every look, same gates",
    Rule.WELCH_EVERY_LOOK_ANY_EFFECT: "Welch at every look, gates but any positive difference",
    Rule.WELCH_EVERY_LOOK: "Welch at every look, no gates (naive)",
    Rule.WELCH_FIXED_HORIZON: "Welch once at day 7, same gates",
    Rule.GUARDRAIL_HALT: "guardrail halt",
    Rule.CS_MISS: "CS misses the true difference",
}


def _rate(result: ScenarioResult, rule: Rule) -> str:
    o = result.outcomes[rule]
    return f"{o.rate:.2%} [{o.rate_lo:.2%}, {o.rate_hi:.2%}]"


def _hours(result: ScenarioResult, rule: Rule) -> str:
    h = result.outcomes[rule].median_hours
    return "—" if h is None else f"{h:.1f}"


def _level(traffic: float, experiments: int, days: float, seed: int) -> tuple[list[str], list[dict]]:
    """All scenarios at one traffic level: the tables (Markdown) and the JSON rows."""
    plan = SimulationPlan(queries_per_day=traffic, days=days)
    deltas = [0.0, 0.01, 0.02, 0.05, -0.02 * plan.control_mean, -0.05 * plan.control_mean]
    results: dict[float, ScenarioResult] = {}
    rows_json: list[dict] = []
    for i, delta in enumerate(deltas):
        with timed() as t:
            results[delta] = run_scenario(plan, delta, experiments, seed=seed + i)
        print(f"traffic {traffic:.0f}/day, delta {delta:+.3f}: {t.seconds:.1f} s", flush=True)
        outcomes = {r.value: o.to_json() for r, o in results[delta].outcomes.items()}
        rows_json.append(
            {
                "queries_per_day": traffic,
                "delta": delta,
                "experiments": experiments,
                "seconds": round(t.seconds, 1),
                "outcomes": outcomes,
            }
        )
    head = (
        f"## {traffic:,.0f} queries/day, {plan.traffic_split:.0%} to treatment, "
        f"{plan.looks} looks over {plan.days:g} days, {experiments:,} experiments per row\n"
    )
    print(head)
    md = [head]
    null = results[0.0]
    rows: list[list[object]] = []
    for rule in PROMOTION_RULES:
        o = null.outcomes[rule]
        rows.append([LABELS[rule], o.fired, _rate(null, rule), f"{o.rate / plan.alpha:.2f}"])
    md.append(print_table("False promotions at Δ = 0", ["rule", "promoted", "rate [95% CI]", "rate / alpha"], rows))
    rows = []
    for delta in (0.01, 0.02, 0.05):
        for rule in PROMOTION_RULES:
            rows.append([f"{delta:+.2f}", LABELS[rule], _rate(results[delta], rule), _hours(results[delta], rule)])
    title = "Power and median time to promotion (Δ = 0.01 is below the minimum effect: promoting it is a mistake)"
    md.append(print_table(title, ["Δ", "rule", "promoted [95% CI]", "median h"], rows))
    rows = []
    for delta in [d for d in deltas if d <= 0] + [0.02]:
        r = results[delta]
        label = f"{delta:+.3f} ({delta / plan.control_mean:+.0%})"
        rows.append([label, _rate(r, Rule.GUARDRAIL_HALT), _hours(r, Rule.GUARDRAIL_HALT)])
    title = "Guardrail halts (limit: 2% relative regression of the control mean)"
    md.append(print_table(title, ["Δ on the guardrail", "halted [95% CI]", "median h"], rows))
    rows = [[f"{d:+.3f}", _rate(results[d], Rule.CS_MISS)] for d in deltas]
    title = "Always-valid 95% confidence sequence: share of experiments where it excluded the true Δ at some look"
    md.append(print_table(title, ["Δ", "missed [95% CI]"], rows))
    return md, rows_json


def _replay(path: Path, traffic: list[float], experiments: int, days: float, seed: int) -> tuple[list[str], list[dict]]:
    """Real tier-1 score pools resampled into the simulator's streams: the promotion rule's
    false-promotion rate (same variant) and power (different variants)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    pools = {k: np.asarray(v["tier1"], dtype=np.float64) for k, v in data["score_pools"].items()}
    md = [
        f"## Replay of real tier-1 score streams ({path.name}: offline answer graph on "
        f"the {data['args'].get('suites', 'squad,mtrag')} samples of {data['args']['squad']} SQuAD 2.0 dev / "
        f"{data['args']['mtrag']} MTRAG-UN dev questions)\n",
        "Pools: "
        + ", ".join(f"{k} n={v.size} mean {v.mean():.4f} sd {v.std(ddof=1):.4f}" for k, v in pools.items())
        + ".\n",
    ]
    rows: list[list[object]] = []
    out: list[dict] = []
    for level, q in enumerate(traffic):
        for i, (c, t, label) in enumerate(REPLAY_PAIRS):
            if c not in pools or t not in pools:
                continue
            plan = replay_plan(pools[c], pools[t], queries_per_day=q, days=days)
            delta = float(pools[t].mean() - pools[c].mean())
            with timed() as tm:
                r = run_scenario(
                    plan, delta, experiments, seed=seed + 1000 + 10 * level + i, pools=(pools[c], pools[t])
                )
            print(f"replay {q:.0f}/day {c} -> {t}: {tm.seconds:.1f} s", flush=True)
            rows.append(
                [
                    f"{q:,.0f}",
                    f"{c} → {t}",
                    label,
                    f"{delta:+.4f}",
                    _rate(r, Rule.ALWAYS_VALID),
                    _hours(r, Rule.ALWAYS_VALID),
                    _rate(r, Rule.WELCH_EVERY_LOOK),
                    _rate(r, Rule.CS_MISS),
                ]
            )
            out.append(
                {
                    "queries_per_day": q,
                    "control": c,
                    "treatment": t,
                    "delta": delta,
                    "sd": plan.sd,
                    "experiments": experiments,
                    "outcomes": {k.value: o.to_json() for k, o in r.outcomes.items()},
                }
            )
    head = ["queries/day", "control → treatment", "", "true Δ", "promoted (ours) [95% CI]", "median h",
            "naive Welch every look", "CS missed true Δ"]  # fmt: skip
    md.append(print_table("Real score streams, 5% to treatment, 7 days, a look every 5 min", head, rows))
    return md, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traffic", type=float, nargs="+", default=[2000.0, 20000.0], help="queries per day")
    ap.add_argument(
        "--experiments", type=int, nargs="+", default=[2000, 2000], help="experiments per scenario, one per level"
    )
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--name", default="experiments_sim", help="results file stem")
    ap.add_argument("--replay", type=Path, default=REPLAY, help="score pools (experiments_scenario.json)")
    ap.add_argument("--replay-experiments", type=int, default=2000)
    ap.add_argument("--replay-traffic", type=float, nargs="+", default=[2000.0], help="queries per day (replay)")
    ap.add_argument("--replay-only", action="store_true", help="only the replay, into <name>_replay.{md,json}")
    args = ap.parse_args()
    counts = args.experiments + [args.experiments[-1]] * (len(args.traffic) - len(args.experiments))

    started = time.time()
    scenarios: list[dict] = []
    md = [
        "# Experiment promotion under continuous monitoring (simulation)\n",
        f"Command: `{' '.join(['.venv/bin/python benchmarks/experiments_sim.py', *sys.argv[1:]])}`\n",
    ]
    for level, (traffic, experiments) in enumerate(zip(args.traffic, counts, strict=False)):
        if args.replay_only:
            break
        tables, rows = _level(traffic, experiments, args.days, args.seed + 100 * level)
        md += tables
        scenarios += rows
    replay: list[dict] = []
    if args.replay and args.replay.exists():
        tables, replay = _replay(args.replay, args.replay_traffic, args.replay_experiments, args.days, args.seed)
        md += tables
    else:
        md.append(f"No replay: {args.replay} does not exist (run benchmarks/experiments_scenario.py first).\n")
    wall = round(time.time() - started, 1)
    md.append(f"Wall time {wall} s on {machine()['cpus']} CPUs (load average {machine()['load_average_1_5_15']}).\n")
    payload: dict[str, object] = {
        "command": " ".join(["benchmarks/experiments_sim.py", *sys.argv[1:]]),
        "plan": {k: v for k, v in asdict(SimulationPlan(days=args.days)).items() if k != "queries_per_day"},
        "traffic": args.traffic,
        "seed": args.seed,
        "scenarios": scenarios,
        "wall_seconds": wall,
        "machine": machine(),
        "replay": replay,
    }
    write_results(args.name + ("_replay" if args.replay_only else ""), payload, "\n".join(md))


if __name__ == "__main__":
    main()
