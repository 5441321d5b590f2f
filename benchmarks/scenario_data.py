"""Real answers for the experiments scenario: the offline answer graph (`ragloop.evaluation.run_suite`,
the harness's runner) on fixed-seed samples of SQuAD 2.0 dev and MTRAG-UN dev, once per pipeline
variant, each answer scored by tier 1 exactly as the evaluation worker does (`ragloop.improve.tier1`:
`compute_features` with the service's default support scorer, then the heuristic model).

Resumable: runs live under benchmarks/.home/experiments_scenario/<suite>/<variant>_<version>/ and
the tier-1 scores in scores-<version>.json beside them; a second call costs seconds.
Shared by `experiments_scenario.py` (the served traffic) and `experiments_sim.py --replay` (the
score streams resampled into the simulator).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.runner import read_records, run_suite
from ragloop.evaluation.suites import Suite, mtrag_suite, squad_suite

HOME = Path(__file__).resolve().parent / ".home" / "experiments_scenario"
SUPPORT_SCORER = "embedding:minilm"  # ServiceConfig.heuristic_support's default

DEFAULT = PipelineConfig()
VARIANTS: dict[str, PipelineConfig] = {
    # the service's default: hybrid retrieval, k = 5
    "hybrid": DEFAULT,
    # a deliberately degraded production config: dense only, 2 passages
    "dense_k2": DEFAULT.with_overrides(retrieval={"mode": "dense", "k": 2}),
    # the default with a knob that does nothing here (the timeout of an external search that is not
    # configured): another config hash, the same answers
    "hybrid_noop": DEFAULT.with_overrides(agent={"external_timeout_s": 4.0}),
}
WORSE = DEFAULT.with_overrides(retrieval={"mode": "bm25", "k": 1}, agent={"tau_lower": 0.75, "tau_upper": 0.9})
"""The config promoted by hand in scenario 1: one BM25 passage and a gate that refuses most answers."""


@dataclass(frozen=True)
class Served:
    """One item answered by one variant: what the query path would record."""

    item_id: str
    suite: str
    question: str
    answer: str
    refused: bool
    latency_ms: float
    tier1: float


def sample(suite: Suite, n: int, seed: int) -> list[Any]:
    """Fixed-seed sample; SQuAD half answerable half not, MTRAG in its own mix."""
    rng = random.Random(seed)
    items = list(suite.items)
    if suite.name == "squad":
        ans = [i for i in items if not i.should_refuse]
        una = [i for i in items if i.should_refuse]
        return rng.sample(ans, n - n // 2) + rng.sample(una, n // 2)
    return rng.sample(items, n)


def _tier1_input(rec: dict[str, Any]) -> Any:
    """The worker's `Tier1Input` from a runner record, built as `service.recorder` builds the job."""
    from ragloop.improve.tier1 import Tier1Input

    texts: dict[str, list[str]] = {}
    for k in rec.get("kept") or []:
        texts.setdefault(k["chunk_id"], []).append(k["text"])
    contexts = [" ".join(v)[:4000] for v in texts.values()]
    scores = sorted((float(c["score"]) for c in (rec.get("chunks") or {}).values()), reverse=True)
    return Tier1Input(
        question=str(rec["question"]),
        answer=str(rec.get("answer") or ""),
        contexts=contexts,
        retrieval_scores=scores[:20],
        refused=bool(rec.get("refused")),
    )


def tier1_scores(records: list[dict[str, Any]], settings: Settings, cache: Path) -> dict[str, float]:
    from ragloop.improve.tier1 import PRIOR, compute_features
    from ragloop.models.chat import run_sync
    from ragloop.models.scoring import make_scorer

    have: dict[str, float] = json.loads(cache.read_text()) if cache.exists() else {}
    todo = [r for r in records if str(r["id"]) not in have and not r.get("error")]
    if todo:
        model = PRIOR  # what `recalibration.active_model` gives a store that was never recalibrated
        scorer = make_scorer(SUPPORT_SCORER, settings)
        for r in todo:
            feats = run_sync(compute_features(_tier1_input(r), scorer))
            have[str(r["id"])] = round(model.score(feats.values), 4)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(have))
        tmp.replace(cache)
    return have


def suites(n_squad: int, n_mtrag: int, seed: int) -> dict[str, tuple[Suite, list[Any]]]:
    sq, mt = squad_suite(), mtrag_suite()
    return {"squad": (sq, sample(sq, n_squad, seed)), "mtrag": (mt, sample(mt, n_mtrag, seed))}


def answer_all(
    n_squad: int,
    n_mtrag: int,
    seed: int = 13,
    workers: int = 2,
    variants: dict[str, PipelineConfig] | None = None,
    only: tuple[str, ...] = ("squad", "mtrag"),
) -> dict[str, list[Served]]:
    """variant name -> its answers (the suites in `only`), computed once and cached."""
    settings = Settings(home=HOME)
    out: dict[str, list[Served]] = {}
    chosen = {k: v for k, v in suites(n_squad, n_mtrag, seed).items() if k in only}
    for name, cfg in (variants or VARIANTS).items():
        served: list[Served] = []
        for sname, (suite, items) in chosen.items():
            run_dir = HOME / sname / f"{name}_{cfg.version_id}"
            t0 = time.perf_counter()
            res = run_suite(suite, name, cfg, run_dir, settings=settings, items=items, workers=workers, judge=None)
            wanted = {i.id for i in items}
            recs = [r for r in read_records(run_dir / "items.jsonl") if str(r["id"]) in wanted]
            scores = tier1_scores(recs, settings, run_dir / f"scores-{cfg.version_id}.json")
            print(
                f"  {sname}/{name}: {len(recs)} answers ({res.ran} new) + tier-1 in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
            served += [
                Served(
                    str(r["id"]),
                    sname,
                    str(r["question"]),
                    str(r.get("answer") or ""),
                    bool(r.get("refused")),
                    float(r.get("latency_ms") or 0.0),
                    scores[str(r["id"])],
                )
                for r in recs
                if not r.get("error") and str(r["id"]) in scores
            ]
        out[name] = served
    return out


def squad_golden_lines(n_squad: int, seed: int) -> list[dict[str, Any]]:
    """The SQuAD sample as golden-set lines (doc ids as the agent reports them)."""
    suite, items = suites(n_squad, 1, seed)["squad"]
    return [
        {
            "question": i.question,
            "expected_answer": "" if i.should_refuse else (i.answers[0] if i.answers else i.reference),
            "required_doc_ids": [] if i.should_refuse else [suite.doc_prefix + d for d in i.gold_docs],
            "domain_tags": ["squad", *(["unanswerable"] if i.should_refuse else [])],
            "should_refuse": i.should_refuse,
        }
        for i in items
    ]


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--squad", type=int, default=120)
    ap.add_argument("--mtrag", type=int, default=80)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--suites", default="squad,mtrag")
    a = ap.parse_args()
    res = answer_all(a.squad, a.mtrag, workers=a.workers, only=tuple(a.suites.split(",")))
    for k, v in res.items():
        print(k, len(v), round(sum(s.tier1 for s in v) / max(1, len(v)), 4))
