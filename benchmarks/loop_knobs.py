"""Which knob closes MTRAG-UN's gap to `baseline`? End-to-end accuracy of config variants on the
traffic part (the simulation's split) of MTRAG-UN dev, and the τL refit on simulated user labels of
the default run, in process (evaluation runner + a SQLite store).

    python benchmarks/loop_knobs.py --variants default,tau0,baseline,norefine --limit 80
    python benchmarks/loop_knobs.py --tau-from default --rated 0.3 --noise 0.1

`--domains` keeps a subset of MTRAG-UN's domains (passages and tasks), a smaller corpus when the
machine is short of CPU (the numbers in the closing report used clapnq,ibmcloud,fiqa).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.datasets import MtragDataset
from ragloop.evaluation.metrics.item import item_metrics
from ragloop.evaluation.runner import read_records, run_suite
from ragloop.evaluation.suites import Suite, mtrag_suite
from ragloop.improve.optimum import split_items
from ragloop.improve.remediation.thresholds import fit_tau_lower, gate_samples
from ragloop.store import Store

OFF = {"tau_upper": 0.0, "tau_lower": 0.0, "refine": False, "rewrite": False, "critique": False}
VARIANTS = {
    "default": {},
    "tau0": {"agent": {"tau_lower": 0.0}},
    "norefine": {"agent": {"refine": False}},
    "sent8": {"agent": {"max_answer_sentences": 8}},
    "norefine_sent8": {"agent": {"refine": False, "max_answer_sentences": 8}},
    "baseline": {"retrieval": {"mode": "dense"}, "agent": {**OFF, "validate_citations": False}},
}


def suite_for(domains: set[str] | None) -> Suite:
    full = mtrag_suite()
    if not domains:
        return full
    ds = full.dataset
    assert isinstance(ds, MtragDataset)
    dom = {c: t.domain for t in ds.tasks for c in t.context_ids}
    sub = MtragDataset(
        tuple(p for p in ds.passages if dom.get(p.doc_id) in domains),
        tuple(t for t in ds.tasks if t.domain in domains),
        name="mtrag-un-" + "-".join(sorted(domains)),
    )
    items = [i for i in full.items if i.meta.get("domain") in domains]
    return Suite("mtrag", items, sub, f"eval-{sub.name}", f"{sub.corpus_filename}#", f"MTRAG-UN dev, {sorted(domains)}")


def e2e(run_dir: Path) -> tuple[float, int, int]:
    recs = read_records(run_dir / "items.jsonl")
    acc = [p[0] / p[1] for r in recs if (p := item_metrics(r).get("e2e_accuracy")) and p[1]]
    return float(np.mean(acc)) if acc else 0.0, len(acc), sum(bool(r.get("refused")) for r in recs)


def tau_refit(run_dir: Path, rated: float, noise: float, seed: int, max_fr: float, db: Path) -> dict[str, object]:
    rng = random.Random(seed)
    db.unlink(missing_ok=True)
    store = Store.open(f"sqlite:///{db}")
    n = 0
    for i, rec in enumerate(read_records(run_dir / "items.jsonl")):
        ans = store.queries.record_answer(
            session_id=f"s{i}",
            question=str(rec.get("question") or rec["id"]),
            answer_text=str(rec.get("answer") or ""),
            pipeline_version="pv-run",
            refused=bool(rec.get("refused")),
            trace={"records": rec.get("trace") or []},
        )
        pair = item_metrics(rec).get("e2e_accuracy")
        if not pair or not pair[1] or rng.random() >= rated:
            continue
        ok = (pair[0] / pair[1] >= 0.5) != (rng.random() < noise)
        correction = rec.get("reference") if not rec.get("should_refuse") and rng.random() < 0.05 else None
        store.feedback.add(ans.answer_id, "positive" if ok else "negative", corrected_answer=correction or None)
        n += 1
    samples = gate_samples(store, "mtrag")
    fit = fit_tau_lower(samples, current=0.3, max_false_refusal=max_fr)
    store.close()
    return {"rated": n, "samples": len(samples), "max_false_refusal": max_fr, "fit": fit.to_json()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="default,tau0,norefine,baseline")
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--domains", default="clapnq,ibmcloud,fiqa")
    ap.add_argument("--home", type=Path, default=Path("benchmarks/.home/loop_knobs"))
    ap.add_argument("--tau-from", default="")
    ap.add_argument("--rated", type=float, default=0.3)
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-false-refusal", type=float, default=0.05)
    args = ap.parse_args()
    runs = args.home / "runs"
    if args.tau_from:
        db = args.home / f"tau-{args.rated}-{args.noise}-{args.seed}.db"
        out = tau_refit(runs / args.tau_from, args.rated, args.noise, args.seed, args.max_false_refusal, db)
        print(json.dumps(out))
        return
    suite = suite_for(set(args.domains.split(",")) if args.domains else None)
    traffic, _test = split_items(suite.items)
    settings = Settings(home=args.home)
    for name in args.variants.split(","):
        cfg = PipelineConfig().with_overrides(**VARIANTS[name])
        run_suite(suite, name, cfg, runs / name, settings=settings, items=traffic[: args.limit], workers=2)
        acc, n, refused = e2e(runs / name)
        print(json.dumps({"variant": name, "e2e_accuracy": round(acc, 4), "n": n, "refused": refused}), flush=True)


if __name__ == "__main__":
    main()
