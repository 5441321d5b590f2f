"""Which refusals a config change flips, per class: a start config against the loop's change on a
part of the simulation's split, so a correct-refusal loss held out can be read against what the loop
could have seen on its traffic.

    RAGLOOP_HOME=... .venv/bin/python benchmarks/refusal_flips.py --dataset mtrag --part traffic --sample 300
    RAGLOOP_HOME=... .venv/bin/python benchmarks/refusal_flips.py --dataset mtrag --part heldout

`--change` is the loop's change as overrides (default: MTRAG-UN's, refinement off + 8 answer
sentences). Both configs run through the evaluation runner (cached per version id under
RAGLOOP_HOME/optimum/<dataset>, `ragloop improve optimum`'s cache). Reported: end-to-end accuracy,
correct refusal (unanswerable items refused) and false refusal (answerable items refused), each with
n, the paired difference with its bootstrap 95% interval, and every item whose refusal flipped with
its question and both terminations. The held-out part is measured here only to explain a result;
nothing is fitted on it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from _common import machine, print_table, write_results

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.runner import read_records, run_suite
from ragloop.evaluation.stats import paired_test
from ragloop.evaluation.suites import EvalItem, Suite, mtrag_suite, squad_suite
from ragloop.improve.optimum import sample_items, sim_heldout, split_items
from ragloop.improve.simulation.data import sample_heldout

LOOP_CHANGE = {"agent": {"refine": False, "max_answer_sentences": 8}}


def records(suite: Suite, cfg: PipelineConfig, items: list[EvalItem], out: Path, workers: int) -> dict[str, Any]:
    run_dir = out / cfg.version_id
    run_suite(
        suite, cfg.name, cfg, run_dir, settings=Settings.from_env(), items=items, workers=workers, judge="lexical"
    )
    wanted = {i.id for i in items}
    return {r["id"]: r for r in read_records(run_dir / "items.jsonl") if r.get("id") in wanted}


def per_class(start: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    from ragloop.evaluation.metrics.item import item_metrics

    ids = sorted(set(start) & set(change))
    out: dict[str, Any] = {}
    for metric in ("e2e_accuracy", "correct_refusal", "false_refusal"):
        a, b = [], []
        for i in ids:
            pa, pb = item_metrics(start[i]).get(metric), item_metrics(change[i]).get(metric)
            if pa and pb and pa[1] and pb[1]:
                a.append(pa[0] / pa[1])
                b.append(pb[0] / pb[1])
        if len(a) >= 2:
            t = paired_test(a, b)
            out[metric] = {"start": sum(a) / len(a), "change": sum(b) / len(b), "n": len(a), **t.to_json()}
    flips = [
        {
            "id": i,
            "unanswerable": bool(start[i].get("should_refuse")),
            "question": start[i].get("standalone") or start[i].get("question"),
            "start_refused": bool(start[i].get("refused")),
            "start_termination": start[i].get("termination_reason"),
            "change_termination": change[i].get("termination_reason"),
        }
        for i in ids
        if bool(start[i].get("refused")) != bool(change[i].get("refused"))
    ]
    return {"items": len(ids), "metrics": out, "flips": flips}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mtrag", choices=("squad", "mtrag"))
    ap.add_argument("--part", default="traffic", choices=("traffic", "heldout"))
    ap.add_argument("--sample", type=int, default=None, help="a fixed random sample of N items of the part")
    ap.add_argument("--change", default=json.dumps(LOOP_CHANGE), help="the loop's change as JSON overrides")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    suite = mtrag_suite() if args.dataset == "mtrag" else squad_suite()
    if args.part == "traffic":
        items = sample_items(split_items(suite.items)[0], args.sample, "refusal-flips")
    else:
        items = sample_heldout(sim_heldout(args.dataset), args.sample, 0)
    start = PipelineConfig()
    change = start.with_overrides(**json.loads(args.change))
    out = Settings.from_env().home / "optimum" / args.dataset
    result = per_class(
        records(suite, start, items, out, args.workers), records(suite, change, items, out, args.workers)
    )
    command = "PYTHONPATH=. .venv/bin/python benchmarks/refusal_flips.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    doc = {
        "command": command,
        "machine": machine(),
        "dataset": args.dataset,
        "part": args.part,
        "start": start.version_id,
        "change": {"version": change.version_id, "overrides": json.loads(args.change)},
        **result,
    }
    metric_rows = [
        [
            name,
            f"{m['start']:.1%}",
            f"{m['change']:.1%}",
            f"{m['diff']:+.3f} [{m['lo']:+.3f}, {m['hi']:+.3f}]",
            f"{m['p_value']:.3g}",
            m["n"],
        ]
        for name, m in result["metrics"].items()
    ]
    flip_rows = [
        [
            f["id"],
            f["unanswerable"],
            str(f["question"]).replace("|", "\\|"),
            f"{'refused' if f['start_refused'] else 'answered'} ({f['start_termination']})",
            f"{'answered' if f['start_refused'] else 'refused'} ({f['change_termination']})",
        ]
        for f in result["flips"]
    ]
    md = "\n".join(
        [
            f"# Refusals flipped by the loop's change ({args.dataset}, {args.part} part, {result['items']} items)",
            "",
            f"Command: `{command}`",
            "",
            f"- machine: {doc['machine']}",
            f"- start {start.version_id}, change {change.version_id}: `{args.change}`",
            "",
            print_table("Per class", ["metric", "start", "change", "paired Δ [95% CI]", "p", "n"], metric_rows),
            print_table(
                f"Items whose refusal flipped: {len(flip_rows)}",
                ["item", "unanswerable", "question", "start", "change"],
                flip_rows,
            ),
        ]
    )
    write_results(f"self_improvement/refusal-flips-{args.dataset}-{args.part}", doc, md)


if __name__ == "__main__":
    main()
