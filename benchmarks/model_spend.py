"""Where a simulation's model time went: each arm's call log by model and purpose, with the held-out
measurement's CPU beside it (the measurement's own calls are not in the arm's call log).

Reads the arms of a finished run (`benchmarks/.home/self_improvement/<arm>/home/ragloop.db`, read
only) and its results JSON. Paid calls are the ones the model ran; cache hits replay a stored answer.

    PYTHONPATH=. .venv/bin/python benchmarks/model_spend.py \
        --results benchmarks/results/self_improvement/self_improvement-whole-reader.json --name model_spend-whole-reader
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import BENCH_HOME, machine, markdown_table, write_results

from ragloop.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", type=Path, required=True, help="the run's results JSON")
    ap.add_argument("--work", type=Path, default=BENCH_HOME / "self_improvement", help="the run's arm folders")
    ap.add_argument("--name", default="model_spend")
    args = ap.parse_args()
    doc = json.loads(args.results.read_text())
    rows, payload = [], []
    for arm in doc["arms"]:
        label = arm["label"]
        db = args.work / label / "home" / "ragloop.db"
        measured = sum(float(m.get("cpu_s") or 0.0) for m in arm["measurements"])
        store = Store.open(f"sqlite:///{db}")
        try:
            usage = store.model_calls.usage(by="purpose")
        finally:
            store.close()
        spend = [
            {"model": u.model, "purpose": u.purpose, "calls": u.calls, "paid": u.calls - u.cached,
             "prompt_tokens": u.prompt_tokens, "model_s": round(u.model_s, 1)}
            for u in usage
        ]  # fmt: skip
        payload.append({"arm": label, "cpu_s": arm["cost"].get("cpu_s"), "measurement_cpu_s": round(measured, 1),
                        "calls": spend})  # fmt: skip
        for s in spend:
            rows.append([label, s["purpose"], s["model"], s["calls"], s["paid"], s["prompt_tokens"], s["model_s"]])
        rows.append([label, "held-out measurement (driver CPU-s)", "", "", "", "", round(measured, 1)])
    headers = ["arm", "purpose", "model", "calls", "paid", "prompt tokens (paid)", "model s (paid)"]
    md = "\n".join(
        [
            f"# Model spend of `{args.results.name}`",
            "",
            f"Command: `PYTHONPATH=. .venv/bin/python benchmarks/model_spend.py --results {args.results}`",
            "",
            f"- machine: {machine()}",
            "",
            markdown_table(headers, rows, digits=1),
            "",
        ]
    )
    print(md)
    write_results(args.name, {"results": str(args.results), "arms": payload}, md)


if __name__ == "__main__":
    main()
