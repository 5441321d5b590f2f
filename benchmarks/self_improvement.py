"""The loop closed (issue 14): the full self-improvement simulation, written to
`benchmarks/results/self_improvement/` (Markdown + JSON + a learning-curve chart per data set).

    .venv/bin/python benchmarks/self_improvement.py                 # all six arms (see --help)
    .venv/bin/python benchmarks/self_improvement.py --datasets squad --days 3   # a reduced run

A thin driver over `ragloop.improve.simulation` (the same code as `ragloop improve simulate --full`):
today's defaults, the degraded start (dense-only, top-k 2, chunk size 200) and adversarial feedback
(50% of ratings flipped) on SQuAD 2.0 and MTRAG-UN, each arm its own `ragloop serve` + `ragloop
worker` on its own compressed clock, traffic through the HTTP API, held-out part measured in-process
before day 1 and after every simulated day. Wall time, CPU time (this process and every served
process), model calls and the share of traffic that reached tier 2 are in the results.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from _common import BENCH_HOME, RESULTS_DIR, machine

from ragloop.improve.simulation.data import parse_sizes
from ragloop.improve.simulation.plan import (
    POSTGRES_URL,
    REDIS_URL,
    Plan,
    default_users,
    full_arms,
    on_postgres,
    simulate,
)
from ragloop.improve.simulation.run import ArmConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="squad,mtrag")
    ap.add_argument("--squad", type=Path, default=None, help="SQuAD 2.0 JSON (default: the shared dev set)")
    ap.add_argument("--mtrag", type=Path, default=None, help="MTRAG-UN JSONL (default: the shared dev set)")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--day-minutes", type=float, default=2.0)
    ap.add_argument("--traffic-per-day", type=int, default=80, help="graded SQuAD turns a simulated day")
    ap.add_argument(
        "--mtrag-traffic-per-day", type=int, default=40, help="graded MTRAG conversations a day (~4.3 turns each)"
    )
    ap.add_argument("--heldout", type=int, default=150, help="held-out items measured (fixed sample)")
    ap.add_argument(
        "--heldout-avoid",
        type=parse_sizes,
        default=(),
        help="sizes of the held-out samples earlier runs measured, in order (e.g. 100,300): their items are left out",
    )
    ap.add_argument(
        "--mtrag-heldout-avoid",
        type=parse_sizes,
        default=None,
        help="the same for MTRAG-UN (default: --heldout-avoid); its 127 held-out tasks make one sample of 127",
    )
    ap.add_argument("--golden", type=int, default=40)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument(
        "--answer-check",
        default=None,
        help="a reader the loop may turn on as the answer check, e.g. llm:local:qwen2.5-coder-1.5b (default: none)",
    )
    ap.add_argument("--parallel", type=int, default=3, help="arms at once")
    ap.add_argument("--only", default="", help="comma-separated arm labels to run (default: all)")
    ap.add_argument("--name", default="self_improvement")
    ap.add_argument("--note", default="", help="a line for the results (e.g. why the run is reduced)")
    ap.add_argument(
        "--defaults-from",
        type=Path,
        default=None,
        help="an earlier results JSON whose defaults arm (same data set, same held-out sample) gives outcome 2's "
        "reference when the degraded arm runs on its own",
    )
    ap.add_argument(
        "--postgres",
        action="store_true",
        help="each arm on its own PostgreSQL database and Redis database (`plan.on_postgres`); default SQLite",
    )
    ap.add_argument("--postgres-url", default=POSTGRES_URL, help="with --postgres: the server, by a database on it")
    ap.add_argument("--redis-url", default=REDIS_URL, help="with --postgres: the Redis server")
    args = ap.parse_args()

    base = ArmConfig(
        label="",
        days=args.days,
        day_minutes=args.day_minutes,
        traffic_per_day=args.traffic_per_day,
        heldout=args.heldout,
        heldout_avoid=args.heldout_avoid,
        golden=args.golden,
        users=default_users(0.30, 0.10, 20),
        workers=args.workers,
        answer_check=args.answer_check,
    )
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    arms = full_arms(base, datasets, {"squad": args.squad, "mtrag": args.mtrag})
    mtrag_avoid = args.heldout_avoid if args.mtrag_heldout_avoid is None else args.mtrag_heldout_avoid
    arms = [
        replace(a, traffic_per_day=args.mtrag_traffic_per_day, heldout_avoid=mtrag_avoid) if a.dataset == "mtrag" else a
        for a in arms
    ]
    if args.only:
        keep = {x.strip() for x in args.only.split(",")}
        arms = [a for a in arms if a.label in keep]
    if args.postgres:
        arms = on_postgres(arms, args.postgres_url, args.redis_url)
    command = "PYTHONPATH=. .venv/bin/python benchmarks/self_improvement.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    meta = {"command": command, "machine": machine(), "backend": "postgres" if args.postgres else "sqlite"}
    if args.note:
        meta["note"] = args.note
    work = BENCH_HOME / "self_improvement"
    plan = Plan(arms, work=work, out_dir=RESULTS_DIR / "self_improvement", name=args.name, meta=meta)
    plan.parallel = args.parallel
    result = simulate(plan)
    if args.defaults_from is not None:
        _outcome_2_from(args.defaults_from, RESULTS_DIR / "self_improvement" / f"{args.name}.json")
    print(result["outcomes"], flush=True)
    for f in result["files"]:
        print(f"wrote {f}", flush=True)


def _outcome_2_from(defaults_json: Path, mine_json: Path) -> None:
    """Outcome 2 for a degraded arm run on its own: the defaults' day 0 from an earlier run on the same
    held-out sample (same split, seed and size), written into this run's JSON and Markdown."""
    import json

    from ragloop.improve.simulation.outcomes import recovery

    ref_doc, doc = json.loads(defaults_json.read_text()), json.loads(mine_json.read_text())

    def acc(arm: dict[str, object], i: int) -> float | None:
        m = arm["measurements"][i]["metrics"].get("e2e_accuracy")  # type: ignore[index]
        return None if not m else float(m["value"])

    for arm in doc["arms"]:
        if arm["start"] != "degraded":
            continue
        ref = next(
            (
                a
                for a in ref_doc["arms"]
                if a["dataset"] == arm["dataset"] and a["start"] == "defaults" and a["flip_share"] < 0.5
            ),
            None,
        )
        if ref is None:
            continue
        out = recovery(arm["label"], acc(arm, 0), acc(arm, -1), acc(ref, 0))
        out["defaults_from"] = str(defaults_json.name)
        doc["outcomes"].setdefault("2", {})[arm["dataset"]] = out
        md = mine_json.with_suffix(".md")
        md.write_text(
            md.read_text()
            + f"\n## Outcome 2 (reference: {defaults_json.name}, defaults arm day 0)\n\n```\n"
            + json.dumps(out, indent=1)
            + "\n```\n"
        )
    mine_json.write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main()
