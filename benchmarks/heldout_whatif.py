"""What the held-out test would measure if a candidate the loop did not promote were serving.

A diagnostic for the closing note, never an input to the loop: it answers "was the candidate or the
guard in the way?" after a simulation arm ended, on a copy of that arm's home (its collection, any
index variants, its store), so the arm itself is left as it finished. Both the version that served
at the end and the candidate are measured in this one run, on the same held-out items, with the
same code as the simulation's daily measurement (`ragloop.improve.simulation.measure`), each
serving alone (an experiment still running in the copy is stopped there), and compared by the
harness's paired test. Nothing here changes a knob: the loop's decisions stand.

    PYTHONPATH=. .venv/bin/python benchmarks/heldout_whatif.py \\
        --arm benchmarks/.home/self_improvement/mtrag-degraded --version pv-... --dataset mtrag --name NAME
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from _common import RESULTS_DIR, machine

from ragloop.experiments.assignment import ExperimentStatus
from ragloop.improve.simulation.data import load_mtrag_sim, load_squad_sim, sample_heldout
from ragloop.improve.simulation.measure import measure, paired
from ragloop.improve.simulation.run import COLLECTION
from ragloop.store import Store

METRICS = ("e2e_accuracy", "correct_refusal", "false_refusal", "context_recall")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", type=Path, required=True, help="an arm's folder (holding home/)")
    ap.add_argument("--version", required=True, help="the candidate version to measure as if it served")
    ap.add_argument("--dataset", choices=("squad", "mtrag"), required=True)
    ap.add_argument("--heldout", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--avoid", default="", help="comma-separated earlier sample sizes, as the arm used")
    ap.add_argument("--name", required=True)
    args = ap.parse_args()

    data = load_mtrag_sim() if args.dataset == "mtrag" else load_squad_sim()
    avoid = tuple(int(x) for x in args.avoid.split(",") if x)
    items = sample_heldout(data.heldout, args.heldout, args.seed, avoid=avoid)
    with tempfile.TemporaryDirectory(prefix="ragloop-whatif-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(args.arm / "home", home, ignore=shutil.ignore_patterns("*.lock", ".lock"))
        store = Store.open(f"sqlite:///{home / 'ragloop.db'}")
        try:
            served = store.pipelines.current()
            assert served is not None
            for exp in store.experiments.list_experiments(status=ExperimentStatus.RUNNING):
                # each version serves alone here: a running experiment would route sessions to its arms
                store.experiments.transition(
                    exp.experiment_id,
                    from_statuses=[ExperimentStatus.RUNNING],
                    to=ExperimentStatus.STOPPED,
                    reason="what-if copy",
                    final=True,
                )
            runs = {}
            for label, version in (("served", served.version_id), ("candidate", args.version)):
                if version != served.version_id:
                    store.pipelines.activate(version, actor="what-if", reason="diagnostic measurement, a copy")
                runs[label] = measure(
                    store,
                    home=home,
                    collection=COLLECTION,
                    items=items,
                    suite=data.name,
                    doc_prefix=data.doc_prefix,
                    run_dir=Path(tmp) / label,
                    day=0,
                    sim_time=label,
                )
        finally:
            store.close()
    out = {
        "meta": {"arm": str(args.arm), "served": served.version_id, "candidate": args.version, "items": len(items)}
        | machine(),
        "metrics": {},
    }
    lines = [
        f"# What-if: {args.version} serving instead of {served.version_id} ({len(items)} held-out items)",
        "",
        "| metric | served | candidate | paired difference |",
        "|---|---|---|---|",
    ]
    for metric in METRICS:
        a, b = runs["served"].metrics.get(metric), runs["candidate"].metrics.get(metric)
        t = paired(runs["served"], runs["candidate"], metric)
        if a is None or b is None:
            continue
        out["metrics"][metric] = {
            "served": {"value": a.value, "lo": a.lo, "hi": a.hi, "n": a.n},
            "candidate": {"value": b.value, "lo": b.lo, "hi": b.hi, "n": b.n},
            "paired": t.to_json() if t is not None else None,
        }
        diff = (
            "–" if t is None else f"{100 * t.diff:+.1f} pt [{100 * t.lo:+.1f}, {100 * t.hi:+.1f}], p = {t.p_value:.3f}"
        )
        lines.append(
            f"| {metric} | {100 * a.value:.1f}% [{100 * a.lo:.1f}, {100 * a.hi:.1f}] n={a.n} "
            f"| {100 * b.value:.1f}% [{100 * b.lo:.1f}, {100 * b.hi:.1f}] n={b.n} | {diff} |"
        )
    RESULTS_DIR.joinpath("self_improvement").mkdir(parents=True, exist_ok=True)
    base = RESULTS_DIR / "self_improvement" / args.name
    base.with_suffix(".json").write_text(json.dumps(out, indent=1, default=str))
    base.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
