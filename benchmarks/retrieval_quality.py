"""Retrieval quality on the shared evaluation sets, every mode side by side, through the real pipeline.

    .venv/bin/python benchmarks/retrieval_quality.py

Each dataset's corpus is written as one JSON-lines file and ingested into a collection under
`benchmarks/.home` (incremental: a second run re-embeds nothing), once with `index_headings`
on (the default) and once with it off. Queries go through `Retriever.retrieve`, hits are mapped
to passage ids (several chunks of one passage count once, at the best one's rank).

Every choice is made on a dev split and reported on the held-out test split and on all queries:
  CACM      dev = odd topic numbers, test = even (26 + 26 judged topics)
  SQuAD 2.0 dev = even-numbered articles of the file, test = odd (whole articles held out)
  MTRAG-UN  dev/test by a hash of the conversation id

How the default is chosen (dev only). A dataset's dev score is the mean of its top-of-ranking
metrics, the ones that matter when a pipeline hands k=5 passages to a reader (CACM nDCG@10;
SQuAD and MTRAG R@5 and MRR@10); a config's score is the mean over the three datasets.
  1. fusion sweep: normalisation x candidate depth x dense weight;
  2. rerank sweep (top_n x weight) on top of the best fusion;
  3. one-standard-error rule over everything swept: the configs whose score is within one
     bootstrap standard error (paired, 1,000 resamples of the dev queries) of the best are
     indistinguishable on this data, and among them the cheapest wins (rerank off before on,
     top 20 reranked before 50, 100 candidates before 1000), then the higher score. The same
     rule over the rerank configs alone gives the rerank defaults for when it is switched on.
MMR is reported on top of the choice (it trades relevance for diversity, which these metrics
cannot reward). CACM's "best config" row is tuned on its dev topics alone, on MAP (the
brief's target metric), over the fusion grid with index headings on and off.

Prints the tables and writes benchmarks/results/retrieval_quality.{json,md}.

`--backend postgres` keeps the collections in PostgreSQL (`--pg-url`, default
`RAGLOOP_COLLECTIONS_URL`) instead of files; `--quick` skips the sweeps and reports bm25, dense and
the default hybrid on every split, to `retrieval_quality_quick_<backend>.{json,md}`, e.g. to put the
two backends side by side:

    nice -n 15 .venv/bin/python benchmarks/retrieval_quality.py --quick --datasets squad2
    nice -n 15 .venv/bin/python benchmarks/retrieval_quality.py --quick --datasets squad2 --backend postgres
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from _common import BENCH_HOME, machine, print_table, timed, write_results

from ragloop.config import PipelineConfig, Settings
from ragloop.config.pipeline import RetrievalConfig
from ragloop.evaluation.datasets import (
    MtragDataset,
    RetrievalDataset,
    RetrievalQuery,
    load_cacm,
    load_mtrag,
    load_squad2,
)
from ragloop.evaluation.metrics import (
    average_precision,
    mean,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)
from ragloop.models import CachedEmbedder
from ragloop.models.embedding import Embedder
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever

Metric = Callable[[Sequence[str], dict[str, int]], float]
SPLITS = ("dev", "test", "all")


# -- shared query-vector memo ---------------------------------------------------------------------


class MemoEmbedder(Embedder):
    """Memoises vectors in memory so a sweep over many configs embeds each query once.

    `embed_one` (the retriever's query path) goes to the bare model exactly as the retriever
    does without this wrapper; `embed` (the reranker's sentences) goes through the persistent
    content-hash cache, so a second benchmark run embeds no sentence again.
    """

    def __init__(self, cached: CachedEmbedder) -> None:
        self.cached = cached
        self.name = cached.name
        self.dim = cached.dim
        self._one: dict[str, np.ndarray] = {}
        self._many: dict[str, np.ndarray] = {}

    def embed_one(self, text: str) -> np.ndarray:
        v = self._one.get(text)
        if v is None:
            v = self._one[text] = self.cached.inner.embed_one(text)
        return v

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._many))
        if missing:
            for t, v in zip(missing, self.cached.embed(missing), strict=True):
                self._many[t] = v
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._many[t] for t in texts])


# -- datasets -------------------------------------------------------------------------------------


@dataclass
class Bench:
    name: str
    label: str
    dataset: RetrievalDataset
    queries: list[RetrievalQuery]
    dev: set[str]
    depth: int
    """Chunks retrieved per query (CACM: 1000, so MAP is over a TREC-depth ranking)."""
    metrics: dict[str, Metric]
    headline: tuple[str, ...]
    collections: dict[bool, Collection] = field(default_factory=dict)
    embedders: dict[bool, MemoEmbedder] = field(default_factory=dict)

    def split(self, qid: str) -> str:
        return "dev" if qid in self.dev else "test"


def _hash_parity(text: str) -> int:
    return int(hashlib.sha1(text.encode()).hexdigest(), 16) % 2


def _squad() -> Bench:
    ds = load_squad2()
    articles = list(dict.fromkeys(q.title for q in ds.questions))
    dev = {q.qid for q in ds.answerable() if articles.index(q.title) % 2 == 0}
    return Bench(
        "squad2",
        "SQuAD 2.0 dev (458 paragraphs, 2,036 answerable questions)",
        ds,
        ds.queries(),
        dev,
        depth=30,
        metrics={
            "R@1": lambda r, g: recall_at_k(r, g, 1),
            "R@5": lambda r, g: recall_at_k(r, g, 5),
            "MRR@10": lambda r, g: reciprocal_rank(r, g, 10),
        },
        headline=("R@5", "MRR@10"),
    )


def _mtrag() -> Bench:
    ds = load_mtrag()
    tasks = ds.retrieval_tasks()
    dev = {t.task_id for t in tasks if _hash_parity(t.conversation_id) == 0}
    return Bench(
        "mtrag-un",
        f"MTRAG-UN dev ({len(ds.passages)} passages, {len(tasks)} answerable/partial tasks with contexts)",
        ds,
        ds.queries(),
        dev,
        depth=30,
        metrics={
            "R@5": lambda r, g: recall_at_k(r, g, 5),
            "MRR@10": lambda r, g: reciprocal_rank(r, g, 10),
        },
        headline=("R@5", "MRR@10"),
    )


def _cacm() -> Bench:
    ds = load_cacm()
    queries = ds.queries()
    return Bench(
        "cacm",
        f"CACM ({len(ds.passages)} abstracts, {len(queries)} judged topics)",
        ds,
        queries,
        {q.qid for q in queries if int(q.qid) % 2 == 1},
        depth=1000,
        metrics={
            "MAP": lambda r, g: average_precision(r, g),
            "nDCG@10": lambda r, g: ndcg_at_k(r, g, 10),
            "P@30": lambda r, g: precision_at_k(r, g, 30),
        },
        headline=("nDCG@10",),
    )


def prepare(
    bench: Bench, settings: Settings, base: PipelineConfig, headings_modes: Sequence[bool] = (True, False)
) -> dict[str, Any]:
    """Write the corpus and (incrementally) ingest it with headings on and off."""
    corpus_dir = BENCH_HOME / "corpora" / bench.name
    bench.dataset.write_corpus(corpus_dir)
    info: dict[str, Any] = {}
    for headings in headings_modes:
        cfg = base.with_overrides(retrieval={"index_headings": headings})
        coll = Collection(f"bench-{bench.name}{'' if headings else '-noheadings'}", settings)
        with timed() as t:
            summary = coll.ingest([corpus_dir], cfg)
        bench.collections[headings] = coll
        retriever = Retriever(coll, cfg.retrieval)
        emb = retriever.embedder
        assert isinstance(emb, CachedEmbedder)
        bench.embedders[headings] = MemoEmbedder(emb)
        info["headings" if headings else "no_headings"] = {
            "chunks": summary.chunks_total,
            "embedded": summary.chunks_embedded,
            "seconds": round(t.seconds, 1),
            "dense_index": coll.load().vectors_index.name,  # exact / usearch / pgvector (HNSW in the database)
        }
        print(
            f"  {coll.name}: {summary.chunks_total} chunks, {summary.chunks_embedded} embedded now, {t.seconds:.1f} s",
            flush=True,
        )
    return info


# -- evaluation -----------------------------------------------------------------------------------


@dataclass
class Result:
    values: dict[str, dict[str, np.ndarray]]
    """split -> metric -> per-query values, in query order."""
    seconds: float

    @property
    def per_split(self) -> dict[str, dict[str, float]]:
        return {s: {m: round(float(v.mean()), 4) for m, v in ms.items()} for s, ms in self.values.items() if ms}

    @property
    def n(self) -> dict[str, int]:
        return {s: len(next(iter(ms.values()))) for s, ms in self.values.items() if ms}

    def per_query_score(self, bench: Bench, split: str = "dev") -> np.ndarray:
        """Each query's mean over the dataset's headline metrics."""
        return np.mean([self.values[split][m] for m in bench.headline], axis=0)

    def score(self, bench: Bench, split: str = "dev") -> float:
        return float(self.per_query_score(bench, split).mean())


def evaluate(
    bench: Bench,
    cfg: RetrievalConfig,
    *,
    splits: Sequence[str] = SPLITS,
    queries: list[RetrievalQuery] | None = None,
) -> Result:
    """Run every query of the wanted splits through the pipeline; "all" means dev + test."""
    headings = cfg.index_headings
    retriever = Retriever(bench.collections[headings], cfg, embedder=bench.embedders[headings])
    wanted = set(splits)
    values: dict[str, dict[str, list[float]]] = {s: {m: [] for m in bench.metrics} for s in SPLITS}
    with timed() as t:
        for q in queries if queries is not None else bench.queries:
            split = bench.split(q.qid)
            if split not in wanted and "all" not in wanted:
                continue
            hits = retriever.retrieve(q.text, k=bench.depth)
            ranked = [bench.dataset.passage_id(h.doc_id) for h in hits]
            gold = dict(q.relevant)
            for name, fn in bench.metrics.items():
                v = fn(ranked, gold)
                values[split][name].append(v)
                if "all" in wanted:
                    values["all"][name].append(v)
    arrays = {
        s: ({m: np.asarray(v, dtype=np.float64) for m, v in ms.items()} if ms[next(iter(ms))] else {})
        for s, ms in values.items()
    }
    return Result(arrays, t.seconds)


@dataclass
class Candidate:
    cfg: RetrievalConfig
    results: dict[str, Result]  # dataset name -> dev result

    def scores(self, benches: Sequence[Bench]) -> dict[str, float]:
        return {b.name: self.results[b.name].score(b) for b in benches}

    def macro(self, benches: Sequence[Bench]) -> float:
        return mean(self.scores(benches).values())

    def cost(self) -> int:
        rr = self.cfg.rerank
        return int(rr.enabled) + int(rr.enabled and rr.top_n > 20) + int(self.cfg.candidates > 100)


def one_se_choice(
    cands: list[Candidate], benches: Sequence[Bench], resamples: int = 1000, seed: int = 0
) -> tuple[Candidate, Candidate, list[tuple[float, float, bool]]]:
    """(chosen, best, [(gap to best, its bootstrap SE, within one SE) per candidate])."""
    rng = np.random.default_rng(seed)
    best = max(cands, key=lambda c: c.macro(benches))
    draws = {}
    for b in benches:
        n = len(best.results[b.name].per_query_score(b))
        draws[b.name] = rng.integers(0, n, size=(resamples, n))

    def boot(c: Candidate) -> np.ndarray:
        per = [c.results[b.name].per_query_score(b)[draws[b.name]].mean(axis=1) for b in benches]
        return np.mean(per, axis=0)

    best_boot = boot(best)
    stats = []
    for c in cands:
        gap = best.macro(benches) - c.macro(benches)
        se = float(np.std(best_boot - boot(c)))
        stats.append((gap, se, gap <= se))
    eligible = [c for c, st in zip(cands, stats, strict=True) if st[2]]
    chosen = min(eligible, key=lambda c: (c.cost(), -c.macro(benches)))
    return chosen, best, stats


def retrieval(base: RetrievalConfig, **overrides: Any) -> RetrievalConfig:
    return PipelineConfig(retrieval=base).with_overrides(retrieval=overrides).retrieval


def describe(cfg: RetrievalConfig) -> str:
    if cfg.mode != "hybrid":
        out = f"{cfg.mode}"
    elif cfg.fusion.method == "rrf":
        out = f"hybrid rrf k={cfg.fusion.rrf_k}"
    else:
        f = cfg.fusion
        out = f"hybrid weighted {f.normalization} w_dense={f.dense_weight:g}"
    out += f", cand={cfg.candidates}"
    if cfg.rerank.enabled:
        out += f", rerank top{cfg.rerank.top_n} w={cfg.rerank.weight:g}"
    if cfg.mmr.enabled:
        out += f", mmr λ={cfg.mmr.lambda_:g}"
    if not cfg.index_headings:
        out += ", no headings"
    return out


def config_json(cfg: RetrievalConfig) -> dict[str, Any]:
    return {
        "mode": cfg.mode,
        "candidates": cfg.candidates,
        "fusion": cfg.fusion.model_dump(mode="json"),
        "rerank": {"enabled": cfg.rerank.enabled, "top_n": cfg.rerank.top_n, "weight": cfg.rerank.weight},
        "mmr": {"enabled": cfg.mmr.enabled, "lambda": cfg.mmr.lambda_},
        "index_headings": cfg.index_headings,
    }


# -- main -----------------------------------------------------------------------------------------


def weighted_grid(start: RetrievalConfig) -> list[RetrievalConfig]:
    return [
        retrieval(
            start,
            candidates=cand,
            fusion={"method": "weighted", "normalization": norm, "dense_weight": w},
        )
        for norm in ("minmax", "zscore")
        for cand in (100, 1000)
        for w in (0.3, 0.4, 0.5, 0.6, 0.7)
    ]


def sweep_dev(configs: list[RetrievalConfig], benches: Sequence[Bench]) -> list[Candidate]:
    out = []
    for cfg in configs:
        cand = Candidate(cfg, {b.name: evaluate(b, cfg, splits=("dev",)) for b in benches})
        out.append(cand)
        print(f"  {describe(cfg)}: dev mean {cand.macro(benches):.4f}", flush=True)
    return out


def quick(benches: Sequence[Bench], base: RetrievalConfig, backend: str, ingest_info: dict[str, Any]) -> None:
    """bm25, dense and the default hybrid on every split: enough to compare storage backends."""
    modes = {"bm25": retrieval(base, mode="bm25"), "dense": retrieval(base, mode="dense"), "hybrid (default)": base}
    results: dict[str, Any] = {}
    per_query: dict[str, Any] = {}
    n_queries: dict[str, Any] = {}
    md = [f"# Retrieval quality, quick ({backend} backend)", ""]
    for b in benches:
        rows: list[list[object]] = []
        results[b.name] = {}
        for label, cfg in modes.items():
            r = evaluate(b, cfg)
            results[b.name][label] = r.per_split
            # per query, in query order, so two backends can be compared pair by pair
            per_query.setdefault(b.name, {})[label] = {
                s: {m: [round(float(x), 4) for x in v] for m, v in ms.items()}
                for s, ms in r.values.items()
                if s != "all"
            }
            n_queries[b.name] = r.n
            rows += [[label, split, *r.per_split[split].values()] for split in SPLITS if split in r.per_split]
        md.append(print_table(f"{b.name} ({backend})", ["mode", "split", *b.metrics], rows, 4))
    write_results(
        f"retrieval_quality_quick_{backend}",
        {
            "backend": backend,
            "command": " ".join(sys.argv),
            "machine": machine(),
            "ingest": ingest_info,
            "n": n_queries,
            "results": results,
            "per_query": per_query,
        },
        "\n".join(md),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="cacm,squad2,mtrag-un", help="comma-separated subset")
    parser.add_argument("--backend", choices=("files", "postgres"), default="files", help="collection storage")
    parser.add_argument("--pg-url", default=os.environ.get("RAGLOOP_COLLECTIONS_URL"), help="with --backend postgres")
    parser.add_argument("--quick", action="store_true", help="no sweeps: bm25, dense and the default hybrid only")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.backend == "postgres" and not args.pg_url:
        parser.error("--backend postgres needs --pg-url or RAGLOOP_COLLECTIONS_URL")
    settings = Settings(home=BENCH_HOME, collections_url=args.pg_url if args.backend == "postgres" else None)
    default = PipelineConfig()
    base = default.retrieval
    builders = {"cacm": _cacm, "squad2": _squad, "mtrag-un": _mtrag}
    benches = [builders[n]() for n in args.datasets.split(",")]

    print(f"preparing collections (incremental ingest, {args.backend} backend)", flush=True)
    modes = (True,) if args.quick else (True, False)  # quick: the default (headings on) only
    ingest_info = {b.name: prepare(b, settings, default, modes) for b in benches}
    if args.quick:
        quick(benches, base, args.backend, ingest_info)
        return
    md = [
        "# Retrieval quality",
        "",
        "Command: `.venv/bin/python benchmarks/retrieval_quality.py` (2-core CPU, ONNX int8 all-MiniLM-L6-v2).",
        "Every choice is made on the dev split; test is held out. Metrics are per passage (a passage's "
        "chunks count once, at the best one's rank). Selection score per dataset: CACM nDCG@10, "
        "SQuAD and MTRAG mean(R@5, MRR@10); a config's score is the mean over datasets.",
        "",
    ]

    # neutral starting point for the sweeps: hybrid, weighted, no rerank/mmr, headings on
    start = retrieval(base, mode="hybrid", rerank={"enabled": False}, mmr={"enabled": False}, index_headings=True)
    grid = weighted_grid(start)

    # (1) fusion sweep and (2) rerank sweep, dev only ----------------------------------------------
    print(f"\nfusion sweep on dev: {len(grid)} configs x {len(benches)} datasets", flush=True)
    with timed() as t_sweep:
        fusion = sweep_dev(grid, benches)
    best_fusion = max(fusion, key=lambda c: c.macro(benches))
    rerank_cfgs = [
        retrieval(best_fusion.cfg, rerank={"enabled": True, "top_n": n, "weight": w})
        for n in (20, 50)
        for w in (0.2, 0.3, 0.4, 0.5)
    ]
    print(f"rerank sweep on dev, on top of {describe(best_fusion.cfg)}", flush=True)
    with timed() as t_rr:
        reranked = sweep_dev(rerank_cfgs, benches)
    swept = fusion + reranked
    chosen_c, best_c, stats = one_se_choice(swept, benches)
    chosen = chosen_c.cfg
    best_rerank = max(reranked, key=lambda c: c.macro(benches)).cfg
    rerank_choice = one_se_choice(reranked, benches)[0].cfg  # the rerank defaults, for when it is on
    rows = []
    for c, (gap, se, ok) in zip(swept, stats, strict=True):
        mark = "chosen" if c is chosen_c else ("best" if c is best_c else ("within 1 SE" if ok else ""))
        rows.append([describe(c.cfg), *c.scores(benches).values(), c.macro(benches), gap, se, c.cost(), mark])
    md.append(
        print_table(
            f"Selection on the dev split ({t_sweep.seconds + t_rr.seconds:.0f} s): fusion sweep, then rerank "
            "on the best fusion; cost = rerank on + rerank top_n > 20 + candidates > 100",
            ["config", *(f"{b.name} dev" for b in benches), "mean", "gap to best", "SE", "cost", ""],
            rows,
            4,
        )
    )
    print(f"best on dev: {describe(best_c.cfg)}; chosen by the one-SE rule: {describe(chosen)}", flush=True)

    # CACM's own best config: tuned on its dev topics alone, on MAP -------------------------------
    cacm_best: RetrievalConfig | None = None
    cacm = next((b for b in benches if b.name == "cacm"), None)
    if cacm is not None:
        own_grid = grid + [retrieval(c, index_headings=False) for c in grid]
        own = [(c, evaluate(cacm, c, splits=("dev",)).per_split["dev"]["MAP"]) for c in own_grid]
        cacm_best = max(own, key=lambda x: x[1])[0]
        print(f"CACM best on its dev MAP: {describe(cacm_best)}", flush=True)

    # (3) per-dataset tables: every mode side by side on dev / test / all ------------------------
    results: dict[str, Any] = {}
    for b in benches:
        cand = 1000 if b.name == "cacm" else base.candidates  # CACM: MAP over a TREC-depth ranking
        own_best = max(fusion, key=lambda c: c.results[b.name].score(b)).cfg
        rows_cfg: list[tuple[str, RetrievalConfig]] = [
            ("bm25", retrieval(start, mode="bm25", candidates=cand)),
            ("dense", retrieval(start, mode="dense", candidates=cand)),
            ("rrf (k=60)", retrieval(start, candidates=cand, fusion={"method": "rrf", "rrf_k": 60})),
            (
                "weighted (minmax, w=0.5)",
                retrieval(
                    start,
                    candidates=cand,
                    fusion={"method": "weighted", "normalization": "minmax", "dense_weight": 0.5},
                ),
            ),
            ("weighted, best on this dev", own_best),
        ]
        if b.name == "cacm" and cacm_best is not None:
            rows_cfg.append(("best on CACM dev MAP", cacm_best))
        rows_cfg += [
            ("best fusion (all dev sets)", best_fusion.cfg),
            ("+ rerank (best on dev)", best_rerank),
            ("chosen (one-SE rule)", chosen),
            ("chosen + mmr (λ=0.7)", retrieval(chosen, mmr={"enabled": True, "lambda": 0.7})),
            ("chosen, headings off", retrieval(chosen, index_headings=False)),
            ("PipelineConfig() default", base),
        ]
        table: list[list[object]] = []
        out_rows: list[dict[str, Any]] = []
        for label, cfg in rows_cfg:
            res = evaluate(b, cfg)
            table.append([label, describe(cfg), *(res.per_split[s][m] for s in SPLITS for m in b.metrics)])
            out_rows.append({"label": label, "config": config_json(cfg), "metrics": res.per_split, "n": res.n})
        n: dict[str, int] = out_rows[0]["n"]
        md.append(
            print_table(
                f"{b.label}: dev {n['dev']} / test {n['test']} / all {n['all']} queries",
                ["row", "config"] + [f"{m} {s}" for s in SPLITS for m in b.metrics],
                table,
                3,
            )
        )
        results[b.name] = {"rows": out_rows, "ingest": ingest_info[b.name], "n": n}

    # MTRAG query variants (conversation-aware baselines) ----------------------------------------
    mtrag = next((b for b in benches if b.name == "mtrag-un"), None)
    if mtrag is not None:
        ds = mtrag.dataset
        assert isinstance(ds, MtragDataset)
        variants = {
            "last user turn": ds.queries(query="last_turn"),
            "user turns, latest first": ds.queries(query="user_turns_latest_first"),
            "all turns, latest first": ds.queries(query="all_turns_latest_first"),
        }
        vrows = []
        vout = []
        for vname, qs in variants.items():
            for label, cfg in (
                ("bm25", retrieval(start, mode="bm25")),
                ("dense", retrieval(start, mode="dense")),
                ("default", base),
            ):
                res = evaluate(mtrag, cfg, queries=qs)
                vrows.append([vname, label, *(res.per_split[s][m] for s in SPLITS for m in mtrag.metrics)])
                vout.append({"query": vname, "row": label, "config": config_json(cfg), "metrics": res.per_split})
        md.append(
            print_table(
                "MTRAG-UN query variants (no tuning: bm25, dense and the default config)",
                ["query", "config"] + [f"{m} {s}" for s in SPLITS for m in mtrag.metrics],
                vrows,
                3,
            )
        )
        results["mtrag-un"]["query_variants"] = vout

    # the default --------------------------------------------------------------------------------
    is_default = config_json(chosen) == config_json(base)
    lines = [
        f"Chosen on dev (one-SE rule): {describe(chosen)}; best dev score: {describe(best_c.cfg)}.",
        f"PipelineConfig() default: {describe(base)}: "
        + ("matches the chosen config." if is_default else "DIFFERS from the chosen config: update the defaults."),
        f"Rerank settings for when it is switched on (one-SE rule among the rerank configs): "
        f"top_n={rerank_choice.rerank.top_n}, weight={rerank_choice.rerank.weight:g}; defaults: "
        f"top_n={base.rerank.top_n}, weight={base.rerank.weight:g}.",
    ]
    for b in benches:
        row = next(r for r in results[b.name]["rows"] if r["label"] == "PipelineConfig() default")
        parts = ", ".join(f"{m} {row['metrics']['all'][m]:.3f}" for m in b.metrics)
        test = ", ".join(f"{m} {row['metrics']['test'][m]:.3f}" for m in b.metrics)
        lines.append(f"  default on {b.name}: all [{parts}]; test [{test}]")
    wall = time.perf_counter() - started
    lines.append(f"Wall time: {wall:.0f} s; load average (1/5/15 min) at the end {machine()['load_average_1_5_15']}.")
    print("\n" + "\n".join(lines), flush=True)
    md += ["### Default", "", *(f"- {line.strip()}" for line in lines), ""]
    write_results(
        "retrieval_quality",
        {
            "machine": machine(),
            "wall_seconds": round(wall, 1),
            "splits": {
                "cacm": "dev = odd topic numbers, test = even",
                "squad2": "dev = even-numbered articles (file order), test = odd",
                "mtrag-un": "dev/test by sha1(conversation_id) parity",
            },
            "selection": {
                "score": "mean over datasets of: CACM nDCG@10; SQuAD, MTRAG mean(R@5, MRR@10); dev split",
                "rule": "one standard error (paired bootstrap, 1000 resamples); cheapest within, then best",
                "swept": [
                    {
                        "config": config_json(c.cfg),
                        "dev_scores": {k: round(v, 4) for k, v in c.scores(benches).items()},
                        "dev_mean": round(c.macro(benches), 4),
                        "gap_to_best": round(gap, 4),
                        "se": round(se, 4),
                        "within_one_se": ok,
                        "cost": c.cost(),
                    }
                    for c, (gap, se, ok) in zip(swept, stats, strict=True)
                ],
                "best_on_dev": config_json(best_c.cfg),
                "chosen": config_json(chosen),
                "cacm_best_on_dev_map": config_json(cacm_best) if cacm_best is not None else None,
                "default_matches_chosen": is_default,
            },
            "datasets": results,
        },
        "\n".join(md),
    )


if __name__ == "__main__":
    main()
