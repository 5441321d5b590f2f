"""Semantic expansion-cache lookup latency (target: p99 < 1 ms), for both backends.

`--entries` cached failed queries (random unit vectors, `--dim` 384 like MiniLM) are written to each
backend: the collection registry (SQLite, a temporary directory) and Redis (`RAGLOOP_REDIS_URL`,
default redis://127.0.0.1:6379/0, under a throwaway key prefix). Queries alternate between a
paraphrase of a cached entry (cosine 0.93: a hit) and an unrelated vector (a miss). Per backend:

- `refresh`: reading every entry from the backend into the in-process matrix (once per version);
- `lookup`: the serving path with a refresh interval of 1 s (no backend round trip per lookup),
  through the sign-sketch prefilter (the default above 2048 entries) and through the exact scan;
- `lookup+version`: refresh interval 0, so every lookup also asks the backend for its version.

    .venv/bin/python benchmarks/expansion_cache.py            # 10k entries, 5000 lookups per row
    .venv/bin/python benchmarks/expansion_cache.py --entries 2000 --lookups 2000 --no-redis

BLAS runs single-threaded (one lookup is one small matrix-vector product). Wall-clock percentiles
include the time the process waited for a CPU; `cpu` percentiles (thread CPU time) show the work
alone, which is what tells the lookup's cost from a shared machine's scheduling. Results:
`benchmarks/results/expansion_cache.json` and `.md`; the load average is recorded with them.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import base64
import json
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import machine, percentiles_ms, print_table, write_results

from ragloop.improve.remediation.expansion_cache import (
    ExpansionCache,
    RedisExpansionBackend,
    RegistryExpansionBackend,
)
from ragloop.ingest.registry import Registry, semantic_expansions_table

PS = (50, 95, 99)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def fill_registry(registry: Registry, vectors: np.ndarray) -> None:
    """One transaction for all rows (setup only; the action writes one entry at a time)."""
    with registry.transaction() as txn:
        txn.conn.execute(
            semantic_expansions_table.insert(),
            [
                {
                    "entry_id": f"e{i:06d}",
                    "query": f"failed query {i}",
                    "embedder": "bench",
                    "vector": v.tobytes(),
                    "chunk_ids": json.dumps([f"c{i}", f"c{i}b"]),
                    "source": "bench",
                    "created_at": 0.0,
                }
                for i, v in enumerate(vectors)
            ],
        )
        txn.bump_semantic_version()


def fill_redis(backend: RedisExpansionBackend, vectors: np.ndarray) -> None:
    pipe = backend.client.pipeline(transaction=False)
    for i, v in enumerate(vectors):
        doc = {
            "query": f"failed query {i}",
            "embedder": "bench",
            "vector": base64.b64encode(v.tobytes()).decode(),
            "chunk_ids": [f"c{i}", f"c{i}b"],
            "source": "bench",
            "created_at": 0.0,
        }
        pipe.hset(backend.key, f"e{i:06d}", json.dumps(doc))
        if i % 1000 == 999:
            pipe.execute()
    pipe.incr(backend.version_key)
    pipe.execute()


def queries(vectors: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Alternating hits (cosine 0.93 to a random entry) and misses; with the expected entry (-1: none)."""
    dim = vectors.shape[1]
    out, want = np.zeros((n, dim), dtype=np.float32), np.full(n, -1)
    for j in range(n):
        if j % 2 == 0:
            i = int(rng.integers(len(vectors)))
            noise = np.asarray(rng.standard_normal(dim), dtype=np.float32)
            noise = _unit(noise - (noise @ vectors[i]) * vectors[i])
            out[j], want[j] = _unit(0.93 * vectors[i] + np.sqrt(1 - 0.93**2) * noise), i
        else:
            out[j] = _unit(np.asarray(rng.standard_normal(dim), dtype=np.float32))
    return out, want


def time_lookups(cache: ExpansionCache, qs: np.ndarray, want: np.ndarray) -> dict[str, Any]:
    for q in qs[:200]:  # warm up
        cache.lookup("", q)
    times, cpu, found = [], [], 0
    for q, w in zip(qs, want, strict=True):
        t, c = time.perf_counter(), time.thread_time()
        got = cache.lookup("", q)
        cpu.append(time.thread_time() - c)
        times.append(time.perf_counter() - t)
        found += w >= 0 and got[:1] == [f"c{w}"]
    hits = int((want >= 0).sum())
    cpu_ms = {f"cpu_{k}": v for k, v in percentiles_ms(cpu, PS).items()}
    return {**percentiles_ms(times, PS), **cpu_ms, "n": len(qs), "hit_recall": round(found / hits, 4) if hits else None}


def bench_backend(name: str, backend: Any, qs: np.ndarray, want: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {"backend": name}
    cache = ExpansionCache(backend, refresh_s=1.0)
    t = time.perf_counter()
    cache.refresh(force=True)
    out["refresh_ms"] = round((time.perf_counter() - t) * 1000, 1)
    out["entries"] = len(cache._snap.chunks)
    out["lookup_sketch"] = time_lookups(cache, qs, want)
    exact = ExpansionCache(backend, refresh_s=1.0, exact_below=10**9)
    exact.refresh(force=True)
    out["lookup_exact"] = time_lookups(exact, qs, want)
    always = ExpansionCache(backend, refresh_s=0.0)
    always.refresh(force=True)
    out["lookup_with_version_check"] = time_lookups(always, qs, want)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--lookups", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-redis", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    vectors = _unit(rng.standard_normal((args.entries, args.dim)).astype(np.float32))
    qs, want = queries(vectors, args.lookups, rng)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        registry = Registry.for_directory(Path(tmp))
        try:
            fill_registry(registry, vectors)
            rows.append(bench_backend("registry (SQLite)", RegistryExpansionBackend(registry), qs, want))
        finally:
            registry.close()
    if not args.no_redis:
        url = os.environ.get("RAGLOOP_REDIS_URL", "redis://127.0.0.1:6379/0")
        backend = RedisExpansionBackend.from_url(url, "bench", prefix=f"ragloop-bench:{secrets.token_hex(4)}")
        try:
            fill_redis(backend, vectors)
            rows.append(bench_backend(f"redis ({url})", backend, qs, want))
        finally:
            backend.client.delete(backend.key, backend.version_key)
            backend.client.close()
    headers = ["backend", "path", "p50 ms", "p95 ms", "p99 ms", "cpu p50", "cpu p99", "hit recall", "refresh ms"]
    table = []
    for r in rows:
        for path in ("lookup_sketch", "lookup_exact", "lookup_with_version_check"):
            m = r[path]
            table.append(
                [
                    r["backend"],
                    path,
                    m["p50"],
                    m["p95"],
                    m["p99"],
                    m["cpu_p50"],
                    m["cpu_p99"],
                    m["hit_recall"],
                    r["refresh_ms"],
                ]
            )
    env = machine()
    title = f"Expansion-cache lookup, {args.entries} entries x {args.dim} dims, {args.lookups} lookups (half hits)"
    md = print_table(title, headers, table)
    md += f"\nload average (1/5/15 min): {env['load_average_1_5_15']} on {env['cpus']} CPUs\n"
    write_results("expansion_cache", {"args": vars(args), "machine": env, "results": rows}, md)


if __name__ == "__main__":
    main()
