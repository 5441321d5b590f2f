"""Tier-1 recalibration on a real labelled set: SQuAD 2.0 dev through the offline answer graph, gold
labels standing in for human reviews, tier 1's 3-way agreement and routing share before and after.

1. The SQuAD 2.0 dev paragraphs (../shared/datasets) are the collection `diag-squad2` in
   `benchmarks/.home` (the diagnosis benchmark's; ingested once, the default pipeline config).
2. `--n` questions (seeded sample, answerable and unanswerable as they come) go through the default
   offline graph (`build_agent`, no chat model). Each answer gets tier 1 exactly as the service
   computes it: the evaluation payload the recorder stores (`EvaluationPayload.from_answer`), the
   features (`compute_features`, with the service's default support scorer `embedding:minilm`).
3. The label of each answer comes from gold: an unanswerable question is right when refused (1) and
   wrong when answered (0); an answerable one is wrong when refused (0) and otherwise scores the
   share of a gold answer's tokens (SQuAD normalisation) the answer contains, best gold answer
   (1 when the answer states the gold span, partial credit for part of it). Each is a reviewer
   label (`LabelSource.REVIEWER`, weight 3): what a person with the gold answer would mark.
4. `ragloop.improve.remediation.tier1.refit` (the function the remediation runs) fits the model on
   the labels outside the stable held-out 20% (`recalibration.held_out`) and decides on the
   held-out labels: replace only at 3-way agreement >= 0.87 with a paired gain interval above 0.
5. Reported on the held-out labels, before (the shipped prior) and after (the refit): 3-way
   agreement (high >= 0.80 / medium 0.60-0.79 / low) with its 95% bootstrap interval, and the
   routing share (answers tier 1 sends to tier 2: score below 0.6, plus the 1% random sample, as
   `route_tier1` decides with the default `RoutingConfig`), with a Wilson interval.

    .venv/bin/python benchmarks/tier1_recalibration.py [--n 400] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from _common import BENCH_HOME, RESULTS_DIR, machine, print_table, write_results

from ragloop.agent.build import build_agent
from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.datasets import SquadQuestion, load_squad2
from ragloop.evaluation.metrics.answer import normalize_answer
from ragloop.improve import recalibration as rc
from ragloop.improve.payload import EvaluationPayload
from ragloop.improve.remediation.tier1 import refit
from ragloop.improve.routing import RoutingConfig, route_tier1
from ragloop.improve.tier1 import PRIOR, HeuristicModel, Tier1Input, compute_features
from ragloop.models.scoring import make_scorer
from ragloop.retrieval.collection import Collection

COLLECTION = "diag-squad2"
SUPPORT_SCORER = "embedding:minilm"
"""`ServiceConfig.heuristic_support`'s default: the support feature the service computes."""


def gold_target(q: SquadQuestion, answer: str, refused: bool) -> float:
    if q.is_impossible:
        return 1.0 if refused else 0.0
    if refused:
        return 0.0
    have = set(normalize_answer(answer).split())
    best = 0.0
    for gold in q.answers:
        toks = normalize_answer(gold).split()
        if toks:
            best = max(best, sum(t in have for t in toks) / len(toks))
    return best


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = p + z * z / (2 * n)
    radius = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return ((centre - radius) / (1 + z * z / n), (centre + radius) / (1 + z * z / n))


def routed(model: HeuristicModel, rows: list[tuple[str, dict[str, float | None]]]) -> dict[str, Any]:
    cfg = RoutingConfig()
    sent = [bool(route_tier1(aid, model.score(f), golden=False, config=cfg).tier2_reasons) for aid, f in rows]
    k, n = sum(sent), len(sent)
    lo, hi = wilson(k, n)
    return {"share": round(k / n, 6) if n else None, "lo": round(lo, 6), "hi": round(hi, 6), "n": n, "routed": k}


def collection(settings: Settings) -> Collection:
    corpus = BENCH_HOME / "corpora" / "squad2"
    load_squad2().write_corpus(corpus)
    coll = Collection(COLLECTION, settings)
    summary = coll.ingest([corpus], PipelineConfig())
    print(f"{COLLECTION}: {summary.chunks_total} chunks, {summary.chunks_embedded} embedded now", flush=True)
    return coll


def answer_all(coll: Collection, questions: list[SquadQuestion], settings: Settings) -> list[dict[str, Any]]:
    support = make_scorer(SUPPORT_SCORER, settings)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tier1-bench-") as tmp:
        d = Path(tmp)
        agent = build_agent(
            coll,
            PipelineConfig(),
            checkpointer_url=f"sqlite:///{d / 'cp.sqlite'}",
            log_url=f"sqlite:///{d / 'log.sqlite'}",
        )
        try:
            t0 = time.perf_counter()
            for i, q in enumerate(questions, 1):
                ans = agent.answer(q.question)
                p = EvaluationPayload.from_answer(q.question, ans)
                item = Tier1Input(
                    question=p.question,
                    answer=p.answer or "",
                    contexts=p.contexts(),
                    retrieval_scores=list(p.retrieval_scores),
                    refused=p.refused,
                )
                feats = asyncio.run(compute_features(item, support))
                out.append(
                    {
                        "qid": q.qid,
                        "impossible": q.is_impossible,
                        "refused": p.refused,
                        "features": {k: (round(v, 6) if v is not None else None) for k, v in feats.values.items()},
                        "target": round(gold_target(q, p.answer or "", p.refused), 6),
                    }
                )
                if i % 50 == 0:
                    print(f"  {i}/{len(questions)} answered ({time.perf_counter() - t0:.0f} s)", flush=True)
        finally:
            agent.memory.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=400, help="questions to answer")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--reuse", action="store_true", help="re-fit on the answers of the last run (same --n, --seed)")
    args = ap.parse_args()

    last = RESULTS_DIR / "tier1_recalibration.json"
    previous = json.loads(last.read_text()) if args.reuse and last.exists() else None
    if previous is not None and (previous["args"]["n"], previous["args"]["seed"]) == (args.n, args.seed):
        rows, answer_s = previous["rows"], previous["answer_seconds"]
    else:
        settings = Settings(home=BENCH_HOME)
        coll = collection(settings)
        questions = random.Random(args.seed).sample(list(load_squad2().questions), args.n)
        started = time.perf_counter()
        rows = answer_all(coll, questions, settings)
        answer_s = time.perf_counter() - started

    at = datetime.now(UTC)
    labels = [
        rc.Label(r["qid"], r["features"], r["target"], rc.REVIEWER_WEIGHT, rc.LabelSource.REVIEWER, at) for r in rows
    ]
    model, evidence = refit(labels, PRIOR, resamples=args.resamples, name="squad")
    fitted = HeuristicModel.from_json(evidence["fitted"])
    test = [lb for lb in labels if rc.held_out(lb.answer_id)]
    test_rows = [(lb.answer_id, lb.features) for lb in test]
    all_rows = [(lb.answer_id, lb.features) for lb in labels]
    before = rc.agreement(PRIOR, test, resamples=args.resamples)
    after = rc.agreement(fitted, test, resamples=args.resamples)
    bands = Counter(rc.band(lb.target) for lb in test)
    majority = max(bands.values()) / len(test) if test else math.nan
    signal = feature_signal(rows)

    table = [
        ["held-out 3-way agreement", before.value, f"[{before.lo:.3f}, {before.hi:.3f}]", after.value,
         f"[{after.lo:.3f}, {after.hi:.3f}]", before.labels],
        ["routing share to tier 2 (held-out)", routed(PRIOR, test_rows)["share"],
         _ci(routed(PRIOR, test_rows)), routed(fitted, test_rows)["share"], _ci(routed(fitted, test_rows)),
         len(test_rows)],
        ["routing share to tier 2 (all answers)", routed(PRIOR, all_rows)["share"], _ci(routed(PRIOR, all_rows)),
         routed(fitted, all_rows)["share"], _ci(routed(fitted, all_rows)), len(all_rows)],
    ]  # fmt: skip
    headers = ["metric", "prior (serving)", "95% CI", "refit", "95% CI", "n"]
    print_table("Tier 1 before and after recalibration", headers, table)
    gain = evidence["agreement_gain"]
    print(
        f"decision: {evidence['decision']} ({evidence['why']}); agreement gain {gain['value']:+.3f} "
        f"[{gain['lo']:+.3f}, {gain['hi']:+.3f}]; held-out label bands {dict(bands)}"
    )
    result = {
        "args": vars(args),
        "machine": machine(),
        "answer_seconds": round(answer_s, 1),
        "questions": len(rows),
        "unanswerable": sum(r["impossible"] for r in rows),
        "refused": sum(r["refused"] for r in rows),
        "label_bands_all": dict(Counter(rc.band(lb.target) for lb in labels)),
        "label_bands_held_out": dict(bands),
        "agreement_before": before.to_json(),
        "agreement_after": after.to_json(),
        "routing_before": {"held_out": routed(PRIOR, test_rows), "all": routed(PRIOR, all_rows)},
        "routing_after": {"held_out": routed(fitted, test_rows), "all": routed(fitted, all_rows)},
        "majority_band_agreement_held_out": round(majority, 6),
        "feature_label_correlation": signal,
        "refit": evidence,
        "replaced": model is not None,
        "prior": PRIOR.to_json(),
        "rows": rows,
    }
    md = _markdown(args, result, headers, table, evidence)
    write_results("tier1_recalibration", result, md)


def feature_signal(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pearson r of each feature with the gold label, among answered and among refused answers
    (None where the feature is constant): how much any linear model on these features can learn."""
    out: dict[str, Any] = {}
    for part, refused in (("answered", False), ("refused", True)):
        sub = [r for r in rows if r["refused"] == refused]
        y = np.array([r["target"] for r in sub], dtype=np.float64)
        part_out: dict[str, float | None] = {}
        for f in sub[0]["features"] if sub else ():
            x = np.array([r["features"][f] if r["features"][f] is not None else np.nan for r in sub], dtype=np.float64)
            ok = ~np.isnan(x)
            constant = ok.sum() < 3 or float(np.std(x[ok])) == 0.0 or float(np.std(y[ok])) == 0.0
            part_out[f] = None if constant else round(float(np.corrcoef(x[ok], y[ok])[0, 1]), 4)
        out[part] = {"n": len(sub), "mean_label": round(float(y.mean()), 4) if len(y) else None, "r": part_out}
    return out


def _ci(r: dict[str, Any]) -> str:
    return f"[{r['lo']:.3f}, {r['hi']:.3f}]"


def _markdown(
    args: argparse.Namespace, result: dict[str, Any], headers: list[str], table: list[list[Any]], ev: dict[str, Any]
) -> str:
    from _common import markdown_table

    gain = ev["agreement_gain"]
    w = ev["fitted"]["weights"]
    doc = __doc__ or ""
    how = re.sub(r"\n\s+\.venv.*", "", doc.split("\n\n", 1)[1]).strip()
    return "\n".join(
        [
            "# Tier-1 recalibration on SQuAD 2.0 dev (gold labels as reviewer labels)",
            "",
            f"`.venv/bin/python benchmarks/tier1_recalibration.py --n {args.n} --seed {args.seed}`: "
            f"{result['questions']} questions ({result['unanswerable']} unanswerable), "
            f"{result['refused']} refused by the offline graph; answering took {result['answer_seconds']} s "
            f"(load average {result['machine']['load_average_1_5_15']}).",
            "",
            markdown_table(headers, table),
            "",
            f"Decision: **{ev['decision']}** ({ev['why']})"
            + (
                ": the serving tier 1 after recalibration is the refit."
                if ev["decision"] == "replaced"
                else ": the serving tier 1 after recalibration is still the prior; the refit column is the "
                "model the check refused."
            )
            + " Agreement gain of the refit over the prior on the "
            f"same held-out labels: {gain['value']:+.3f} [{gain['lo']:+.3f}, {gain['hi']:+.3f}]. "
            f"Train {ev['train']['labels']} labels, held out {ev['held_out']['labels']}. "
            f"Held-out label bands: {result['label_bands_held_out']}.",
            "",
            f"Always answering the majority band would agree on {result['majority_band_agreement_held_out']:.3f} "
            "of the held-out labels. Correlation of each feature with the gold label (Pearson r): "
            + "; ".join(
                f"{part} answers (n {v['n']}, mean label {v['mean_label']}): "
                + ", ".join(f"{f} {r:+.3f}" for f, r in v["r"].items() if r is not None)
                for part, v in result["feature_label_correlation"].items()
            )
            + " (the others are constant there).",
            "",
            "Refit weights: "
            + ", ".join(f"{k} {v:+.3f}" for k, v in w.items())
            + f"; bias {ev['fitted']['bias']:+.3f}.",
            "",
            "## How",
            "",
            how,
            "",
        ]
    )


if __name__ == "__main__":
    main()
