"""Does the oracle find the gold passage of an MTRAG-UN answer? Scored whole vs per claim.

    PYTHONPATH=. .venv/bin/python benchmarks/oracle_claims.py [--tasks 80]

Why: the simulation's MTRAG arms diagnosed most failures as knowledge gaps (50 of 66 from the
degraded start) although every answerable task's gold passages are in the corpus. The oracle scores a
chunk by relevance x coverage² of the ideal answer's content terms; an MTRAG reference answer is a
paragraph (median 75 words), which no one chunk covers. `IdealAnswer.parts` scores each claim
sentence on its own and keeps the best.

What it runs: answerable MTRAG-UN tasks of the simulation's *traffic* part (never the held-out
part), a fixed sample; the real oracle (`OracleRetriever`, lexical scorer, the shipped thresholds and
the collection's background) over the corpus chunked at each size; the same candidates scored both
ways. Per variant: the share of tasks whose oracle set is empty (the tree's knowledge gap), whose
oracle set holds a gold chunk, how pure the oracle sets are (share of their chunks from a gold
document), and how often the best *non-gold* candidate reaches the threshold (what would stand in
for the answer were the gold passage missing: a proxy for a knowledge gap mistaken for support).
Wilson 95% intervals; writes benchmarks/results/oracle_claims.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path
from typing import Any

from _common import BENCH_HOME, machine, print_table, write_results

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.datasets import load_mtrag
from ragloop.evaluation.stats import proportion_ci
from ragloop.evaluation.suites import EvalItem, mtrag_suite_from
from ragloop.improve.oracle import IdealAnswer, OracleRetriever, Scored, score_chunks, score_statements
from ragloop.improve.simulation.split import is_test
from ragloop.improve.types import Thresholds
from ragloop.models.scoring import make_scorer
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever

VARIANTS = {"whole answer": score_statements, "per claim (shipped)": score_chunks}


def traffic_tasks(n: int, seed: int) -> tuple[list[EvalItem], Any]:
    ds = load_mtrag(None)
    conv = {t.task_id: t.conversation_id for t in ds.tasks}
    items = [i for i in mtrag_suite_from(ds).items if i.gold_docs and i.reference and not is_test(conv[i.id])]
    random.Random(seed).shuffle(items)
    return items[:n], ds


def collection(size: int | None, ds: Any) -> tuple[Collection, PipelineConfig]:
    label = "default" if size is None else str(size)
    settings = Settings(home=BENCH_HOME / "oracle_claims" / label)
    corpus = BENCH_HOME / "corpora" / "mtrag"
    ds.write_corpus(corpus)
    chunking = {} if size is None else {"chunking": {"size": size, "overlap": 25}}
    cfg = PipelineConfig.model_validate(chunking)
    coll = Collection(f"oracle-claims-{label}", settings)
    coll.ingest([corpus], cfg)
    return coll, cfg


def _gold(doc_id: str, gold: set[str]) -> bool:
    return doc_id.rsplit("#", 1)[-1] in gold


async def measure(size: int | None, items: list[EvalItem], ds: Any) -> dict[str, Any]:
    coll, cfg = collection(size, ds)
    scorer = make_scorer("lexical", coll.settings)
    oracle = OracleRetriever(coll, scorer, config=cfg.retrieval, embedder=Retriever(coll).embedder)
    t = Thresholds()
    gen = coll.load()
    text_of = {c.chunk_id: c.text for c in gen.chunks}
    counts = {v: {"empty": 0, "gold_in": 0, "set_chunks": 0, "set_gold": 0, "impostor": 0} for v in VARIANTS}
    found_gold = 0
    start = time.perf_counter()
    for item in items:
        res = await oracle.retrieve(item.question, item.reference)
        floor = res.floor(t.oracle, t.background_quantile)
        gold = set(item.gold_docs)
        cands = list(res.candidates)
        found_gold += any(_gold(c.doc_id, gold) for c in cands)
        ideal = IdealAnswer(item.question, item.reference)
        for name, fn in VARIANTS.items():
            scored: list[Scored] = await fn(scorer, ideal, [text_of[c.chunk_id] for c in cands])
            best = max((s.score for s in scored), default=0.0)
            members = [c for c, s in zip(cands, scored, strict=True) if s.score >= max(floor, t.oracle_relative * best)]
            others = (s.score for c, s in zip(cands, scored, strict=True) if not _gold(c.doc_id, gold))
            impostor = max(others, default=0.0)
            k = counts[name]
            k["empty"] += not members
            k["gold_in"] += any(_gold(c.doc_id, gold) for c in members)
            k["set_chunks"] += len(members)
            k["set_gold"] += sum(_gold(c.doc_id, gold) for c in members)
            k["impostor"] += impostor >= floor
    n = len(items)
    return {
        "chunk_size": size or cfg.chunking.size,
        "chunks": len(gen.chunks),
        "tasks": n,
        "gold_among_candidates": proportion_ci(found_gold, n).to_json(),
        "seconds": round(time.perf_counter() - start, 1),
        "variants": {
            v: {
                "knowledge_gap": proportion_ci(k["empty"], n).to_json(),
                "gold_in_oracle_set": proportion_ci(k["gold_in"], n).to_json(),
                "oracle_set_gold_share": proportion_ci(k["set_gold"], k["set_chunks"]).to_json(),
                "non_gold_at_threshold": proportion_ci(k["impostor"], n).to_json(),
            }
            for v, k in counts.items()
        },
    }


def _ci(e: dict[str, Any]) -> str:
    return f"{e['value']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}] n={e['n']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-sizes", default="200,default", help="comma-separated; default: PipelineConfig()'s")
    args = parser.parse_args()
    items, ds = traffic_tasks(args.tasks, args.seed)
    sizes = [None if s == "default" else int(s) for s in args.chunk_sizes.split(",")]
    results = [asyncio.run(measure(size, items, ds)) for size in sizes]
    rows = [
        [
            r["chunk_size"],
            v,
            _ci(m["knowledge_gap"]),
            _ci(m["gold_in_oracle_set"]),
            _ci(m["oracle_set_gold_share"]),
            _ci(m["non_gold_at_threshold"]),
        ]
        for r in results
        for v, m in r["variants"].items()
    ]
    headers = [
        "chunk size",
        "scoring",
        "oracle empty (knowledge gap)",
        "gold chunk in oracle set",
        "oracle-set chunks from a gold doc",
        "best non-gold ≥ threshold",
    ]
    md = [
        "# The oracle on MTRAG-UN reference answers: whole vs per claim\n",
        f"Command: `PYTHONPATH=. .venv/bin/python benchmarks/oracle_claims.py --tasks {args.tasks}`\n",
        f"{len(items)} answerable MTRAG-UN tasks of the simulation's traffic part (seed {args.seed}); every one "
        "has its gold passages in the corpus, so an empty oracle set is a wrong knowledge gap. "
        + "; ".join(
            f"chunk size {r['chunk_size']}: {r['chunks']} chunks, "
            f"gold among the candidates {_ci(r['gold_among_candidates'])}"
            for r in results
        )
        + ".\n",
        print_table("Oracle sets (Wilson 95% intervals)", headers, rows),
    ]
    write_results("oracle_claims", {"machine": machine(), "args": vars(args), "results": results}, "\n".join(md))


if __name__ == "__main__":
    Path(BENCH_HOME).mkdir(parents=True, exist_ok=True)
    main()
