"""Issue 13's proof: the experiment and regression machinery, end to end on real answers, a week in minutes.

    nice -n 10 .venv/bin/python benchmarks/experiments_scenario.py          # ~10-15 min on 2 cores
    nice -n 10 .venv/bin/python benchmarks/experiments_scenario.py --squad 40 --mtrag 30 --days 3  # quick

Everything runs through the code paths production runs (`ragloop.experiments`: versions,
registry, assignment, aggregation, promotion, regression; a real SQLite store), on the loop's
injectable clock (`ragloop.improve.clock.ManualClock`), so 7 days of traffic take minutes. The
answers are real: the offline answer graph on fixed-seed samples of SQuAD 2.0 dev and MTRAG-UN dev
(`scenario_data.py`: the harness's runner, cached), each scored by tier 1 (`ragloop.improve.tier1`,
the worker's features and model).

1. **Regression catches a bad promotion.** The golden set (the SQuAD sample, imported into the
   store; 20% held out by the store's own rule) is run through the default pipeline: the baseline.
   A day later an admin promotes a deliberately worse config by hand (BM25, one passage, a high
   refusal gate). The next nightly regression run (`run_regression`, the agent answering live)
   finds the drop on its 95% intervals and rolls back to the baseline's version.
2. **A truly better treatment is promoted only after significance.** Production runs a degraded
   config (dense only, top-k 2); the experiment's treatment is the default hybrid pipeline. Queries
   arrive (Poisson, diurnal) from a population of sessions; each session is assigned by the
   service's consistent hashing; its question is drawn from the pooled SQuAD + MTRAG sample and
   answered by its arm's pipeline; the answer and its tier-1 score are recorded as the query path
   and the worker record them. `aggregate` runs after every look (hourly here); it promotes only
   when every rule holds (always-valid p < 0.05, samples, 24 h, effect ≥ 0.02, golden smoke test).
   The always-valid p is printed over time, with the look at which it first fell below 0.05.
3. **An equal treatment is never promoted.** Treatment = the default with a knob that does nothing
   here (`agent.external_timeout_s`, no external search configured; another config hash, the same
   answers), for the full week.

Prints each scenario's audit trail (the store's improvement audit log) and the simulation table
(benchmarks/results/experiments_sim.md), and writes benchmarks/results/experiments_scenario.{md,json}
(with the per-variant tier-1 score pools that `experiments_sim.py --replay` resamples).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS_DIR, machine, print_table, write_results
from scenario_data import HOME, VARIANTS, WORSE, Served, answer_all, squad_golden_lines, suites

from ragloop.config import PipelineConfig, Settings
from ragloop.experiments import ComputedAssigner, ExperimentStatus
from ragloop.experiments.aggregation import aggregate
from ragloop.experiments.golden import GoldenLine, add_entry
from ragloop.experiments.registry import ExperimentSpec, create_experiment
from ragloop.experiments.regression import run_regression
from ragloop.experiments.runtime import build_answerer, golden_smoke_test
from ragloop.improve.clock import ManualClock
from ragloop.store import Store

ACTOR = "scenario"


def _store(tmp: Path, name: str) -> Store:
    return Store.open(f"sqlite:///{tmp / f'{name}.db'}")


def _golden(store: Store, lines: list[dict[str, Any]]) -> int:
    for line in lines:
        add_entry(store, GoldenLine.model_validate(line), created_by=ACTOR)
    return len(lines)


def _activate(store: Store, cfg: PipelineConfig, reason: str, via: str = "admin") -> str:
    row = store.pipelines.register_config(cfg, created_by=ACTOR, description=reason)
    store.pipelines.activate(row.version_id, actor=ACTOR, reason=reason, via=via)
    return row.version_id


def audit_trail(store: Store) -> list[dict[str, Any]]:
    rows = list(reversed(store.audit.timeline(limit=200)))
    return [
        {
            "action": r.action_type,
            "actor": r.actor,
            "triggered_by": r.triggered_by[:160],
            "before": r.pipeline_version_before,
            "after": r.pipeline_version_after,
        }
        for r in rows
    ]


def _print_trail(title: str, trail: list[dict[str, Any]]) -> str:
    rows = [[t["action"], t["actor"], t["before"] or "", t["after"] or "", t["triggered_by"]] for t in trail]
    return print_table(title, ["action", "actor", "version before", "version after", "triggered by"], rows)


# --------------------------------------------------------------------------- 1. regression


def scenario_regression(tmp: Path, settings: Settings, collection: str, golden: list[dict[str, Any]]) -> dict[str, Any]:
    clock = ManualClock()
    with _store(tmp, "regression") as store:
        n = _golden(store, golden)
        good = _activate(store, VARIANTS["hybrid"], "initial deployment")
        t0 = time.perf_counter()
        base = run_regression(
            store, build_answerer(settings, collection, VARIANTS["hybrid"]), pipeline_version=good, clock=clock
        )
        print(f"  baseline run {base.run_id[:8]} on {good}: {base.metrics} ({time.perf_counter() - t0:.0f} s)")
        clock.advance(days=1)
        worse_row = store.pipelines.register_config(WORSE, created_by="admin", description="by hand")
        store.pipelines.activate(worse_row.version_id, actor="admin", reason="promoted by hand, no experiment")
        current = store.pipelines.current()
        assert current is not None and current.version_id == worse_row.version_id
        clock.advance(days=1)
        t0 = time.perf_counter()
        hit = run_regression(
            store, build_answerer(settings, collection, WORSE), pipeline_version=worse_row.version_id, clock=clock
        )
        took = time.perf_counter() - t0
        print(f"  nightly run {hit.run_id[:8]} on {worse_row.version_id}: {hit.metrics} ({took:.0f} s)")
        after = store.pipelines.current()
        return {
            "golden_entries": n,
            "working_set": base.entries,
            "good_version": good,
            "worse_version": worse_row.version_id,
            "baseline": base.to_json(),
            "nightly": hit.to_json(),
            "current_after": after.version_id if after else None,
            "caught_and_rolled_back": bool(hit.regression_detected and after and after.version_id == good),
            "audit": audit_trail(store),
        }


# --------------------------------------------------------------------------- 2 and 3. experiments


def _aligned(a: list[Served], b: list[Served]) -> tuple[list[Served], list[Served]]:
    """The items both variants answered, in one order: a query's question is drawn once."""
    bi = {s.item_id: s for s in b}
    keep = [s for s in a if s.item_id in bi]
    return keep, [bi[s.item_id] for s in keep]


def scenario_experiment(
    name: str,
    tmp: Path,
    settings: Settings,
    collection: str,
    golden: list[dict[str, Any]],
    control: tuple[str, list[Served]],
    treatment: tuple[str, list[Served]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    clock = ManualClock()
    rng = np.random.default_rng(args.seed)
    c_pool, t_pool = _aligned(control[1], treatment[1])
    with _store(tmp, name) as store:
        _golden(store, golden)
        control_version = _activate(store, VARIANTS[control[0]], f"production runs {control[0]}")
        treatment_version = store.pipelines.register_config(VARIANTS[treatment[0]], created_by=ACTOR).version_id
        spec = ExperimentSpec.model_validate(
            {
                "name": name,
                "control": control_version,
                "treatment": treatment_version,
                "traffic_split": args.split,
                "min_sample_size": args.min_samples,
                "min_duration": 86400.0,
                "primary_metric": "tier1_score",
                "min_effect": 0.02,
                "guardrail_metrics": ["refusal_rate"],
            }
        )
        exp = create_experiment(store, spec, actor=ACTOR, clock=clock)
        eid = exp.experiment_id
        assigner = ComputedAssigner()
        smoke = golden_smoke_test(store, settings, collection)
        timeline: list[dict[str, Any]] = []
        status = ExperimentStatus.RUNNING
        first_significant: float | None = None
        hours = int(args.days * 24)
        served = {"control": 0, "treatment": 0}

        def serve_hour(count: int) -> None:
            for _ in range(count):
                session = f"s{int(rng.integers(args.sessions))}"
                a = assigner.assign(eid, session, args.split, status)
                i = int(rng.integers(len(c_pool)))
                s = (t_pool if a.variant.value == "treatment" else c_pool)[i]
                ans = store.queries.record_answer(
                    session_id=session,
                    question=s.question,
                    answer_text=s.answer,
                    pipeline_version=treatment_version if a.variant.value == "treatment" else control_version,
                    refused=s.refused,
                    latency_ms=int(s.latency_ms),
                    experiment_id=eid,
                    variant=a.variant.value,
                )
                store.evaluations.add(ans.answer_id, "heuristic", heuristic_score=s.tier1)
                served[a.variant.value] += 1

        for hour in range(hours):
            rate = args.traffic / 24.0 * (1.0 + 0.5 * math.sin(2 * math.pi * (hour + 0.5) / 24.0))
            with store.db.transaction():  # the hour's queries in one commit: the store's write path, batched
                serve_hour(int(rng.poisson(rate)))
            clock.advance(3600)
            res = aggregate(store, eid, clock, smoke_test=smoke, actor="aggregator")
            p = res["p_value"]
            m = res["metrics"]["tier1_score"]
            cmp = m.get("comparison") or {}
            row = {
                "hour": hour + 1,
                "control_n": m["control"]["n"],
                "treatment_n": m["treatment"]["n"],
                "difference": cmp.get("difference"),
                "always_valid_p": p["always_valid"],
                "welch_p": p["welch"],
                "recommendation": res["recommendation"],
                "status": res["status"],
            }
            timeline.append(row)
            if first_significant is None and p["always_valid"] is not None and p["always_valid"] < 0.05:
                first_significant = hour + 1
            status = ExperimentStatus(res["status"]) if res["status"] in set(ExperimentStatus) else status
            if status is not ExperimentStatus.RUNNING:
                break
        row_final = store.experiments.get(eid)
        current = store.pipelines.current()
        promoted_at = next((r["hour"] for r in timeline if r["status"] == "promoted"), None)
        return {
            "experiment_id": eid,
            "control": {"variant": control[0], "version": control_version, "pool_mean": _mean(c_pool)},
            "treatment": {"variant": treatment[0], "version": treatment_version, "pool_mean": _mean(t_pool)},
            "identical_answers": sum(a.answer == b.answer for a, b in zip(c_pool, t_pool, strict=True)),
            "pool_items": len(c_pool),
            "spec": spec.model_dump(mode="json"),
            "served": served,
            "final_status": row_final.status if row_final else None,
            "current_after": current.version_id if current else None,
            "first_always_valid_p_below_alpha_hour": first_significant,
            "promoted_at_hour": promoted_at,
            "timeline": timeline,
            "final_results": {k: res[k] for k in ("metrics", "p_value", "samples", "recommendation", "reasons")},
            "audit": audit_trail(store),
        }


def _mean(pool: list[Served]) -> float:
    return round(float(np.mean([s.tier1 for s in pool])), 4) if pool else float("nan")


def _p_table(title: str, res: dict[str, Any], every: int) -> str:
    tl = res["timeline"]
    keep = {r["hour"] for r in tl if r["hour"] % every == 0} | {tl[-1]["hour"]}
    if res["first_always_valid_p_below_alpha_hour"]:
        keep.add(res["first_always_valid_p_below_alpha_hour"])
    rows = [
        [
            r["hour"],
            r["control_n"],
            r["treatment_n"],
            "—" if r["difference"] is None else f"{r['difference']:+.4f}",
            "—" if r["always_valid_p"] is None else f"{r['always_valid_p']:.4f}",
            "—" if r["welch_p"] is None else f"{r['welch_p']:.4f}",
            r["recommendation"],
            r["status"],
        ]
        for r in tl
        if r["hour"] in keep
    ]
    head = ["hour", "control n", "treatment n", "Δ tier-1", "always-valid p", "Welch p", "recommendation", "status"]
    return print_table(title, head, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--squad", type=int, default=60, help="SQuAD 2.0 dev questions (half unanswerable)")
    ap.add_argument("--mtrag", type=int, default=40, help="MTRAG-UN dev tasks")
    ap.add_argument("--golden", type=int, default=30, help="SQuAD questions in the golden set")
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--traffic", type=float, default=1200.0, help="queries per simulated day")
    ap.add_argument("--split", type=float, default=0.2, help="treatment share")
    ap.add_argument("--min-samples", type=int, default=300)
    ap.add_argument("--sessions", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--suites", default="squad,mtrag", help="which samples serve the traffic")
    args = ap.parse_args()
    started = time.perf_counter()
    print("answers (cached under benchmarks/.home/experiments_scenario):", flush=True)
    answers = answer_all(
        args.squad, args.mtrag, seed=args.seed, workers=args.workers, only=tuple(args.suites.split(","))
    )
    settings = Settings(home=HOME)
    collection = suites(args.squad, 1, args.seed)["squad"][0].collection_name
    golden = squad_golden_lines(args.golden, args.seed + 1)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        tmp = Path(d)
        print("\n1. a worse config promoted by hand, then the nightly regression run", flush=True)
        reg = scenario_regression(tmp, settings, collection, golden)
        print("\n2. better treatment (hybrid) vs degraded production (dense-only top-k 2)", flush=True)
        better = scenario_experiment(
            "hybrid-vs-dense-k2", tmp, settings, collection, golden,
            ("dense_k2", answers["dense_k2"]), ("hybrid", answers["hybrid"]), args,
        )  # fmt: skip
        print("\n3. equal treatment (a no-op knob) vs production (hybrid)", flush=True)
        equal = scenario_experiment(
            "hybrid-vs-noop", tmp, settings, collection, golden,
            ("hybrid", answers["hybrid"]), ("hybrid_noop", answers["hybrid_noop"]), args,
        )  # fmt: skip
    wall = round(time.perf_counter() - started, 1)
    used = args.suites.split(",")
    parts = (("squad", f"{args.squad} SQuAD 2.0 dev"), ("mtrag", f"{args.mtrag} MTRAG-UN dev"))
    samples = " + ".join(label for key, label in parts if key in used) + " questions"
    md = [
        "# Experiments and regression scenario (issue 13's proof)\n",
        f"Command: `{' '.join(['nice -n 10 .venv/bin/python benchmarks/experiments_scenario.py', *sys.argv[1:]])}`\n",
        f"Real answers: offline answer graph on {samples} "
        f"(seed {args.seed}), tier-1 scored; {args.traffic:g} queries/simulated day, {args.split:.0%} to treatment, "
        f"min {args.min_samples} per arm, 24 h minimum, min effect 0.02, guardrail refusal_rate, one look an hour.\n",
    ]
    md.append("## 1. A worse config promoted by hand; the nightly regression\n")
    rows = [
        [c["metric"], c["n"], f"{c['baseline_mean']:.3f}", f"{c['current_mean']:.3f}",
         f"{c['difference']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]", f"{c['relative_change']:+.1%}",
         "yes" if c["regressed"] else "no"]
        for c in reg["nightly"]["comparisons"]
    ]  # fmt: skip
    head = ["metric", "n", "baseline", "nightly", "difference [95% CI]", "relative", "regressed"]
    md.append(print_table("Nightly run vs baseline (paired, per golden entry)", head, rows))
    md.append(
        f"Caught and rolled back: **{reg['caught_and_rolled_back']}** (current after: {reg['current_after']}, "
        f"good {reg['good_version']}, worse {reg['worse_version']}). Alert: {reg['nightly']['alert']}\n"
    )
    md.append(_print_trail("Audit trail (scenario 1)", reg["audit"]))
    for title, res in (("2. Better treatment", better), ("3. Equal treatment", equal)):
        md.append(f"## {title}: {res['treatment']['variant']} vs {res['control']['variant']}\n")
        md.append(
            f"Pool means (tier-1, {res['pool_items']} questions): control {res['control']['pool_mean']}, "
            f"treatment {res['treatment']['pool_mean']}; "
            f"identical answers {res['identical_answers']}/{res['pool_items']}. Served: {res['served']}. "
            f"First always-valid p < 0.05 at hour {res['first_always_valid_p_below_alpha_hour']}; "
            f"promoted at hour {res['promoted_at_hour']}; final status **{res['final_status']}**; "
            f"current version after: {res['current_after']}.\n"
        )
        md.append(_p_table(f"Always-valid p over time ({title})", res, 12))
        md.append(_print_trail(f"Audit trail ({title})", res["audit"]))
    sim = RESULTS_DIR / "experiments_sim.md"
    if sim.exists():
        md.append("## The simulation table (benchmarks/results/experiments_sim.md)\n")
        md.append(sim.read_text(encoding="utf-8"))
        print(sim.read_text(encoding="utf-8"))
    md.append(f"Wall time {wall} s on {machine()['cpus']} CPUs (load average {machine()['load_average_1_5_15']}).\n")
    payload: dict[str, Any] = {
        "command": " ".join(["benchmarks/experiments_scenario.py", *sys.argv[1:]]),
        "args": vars(args),
        "regression": reg,
        "better": better,
        "equal": equal,
        "score_pools": {
            k: {"item_ids": [s.item_id for s in v], "tier1": [s.tier1 for s in v]} for k, v in answers.items()
        },
        "wall_seconds": wall,
        "machine": machine(),
    }
    write_results("experiments_scenario", payload, "\n".join(md))


if __name__ == "__main__":
    main()
