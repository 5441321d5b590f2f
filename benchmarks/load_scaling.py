"""Scale-out: the MTRAG-UN load replay against 1 and 2 `ragloop serve` processes and 1, 2 and 4
`ragloop worker` processes on one PostgreSQL database and one Redis (127.0.0.1 only).

    .venv/bin/python benchmarks/load_scaling.py [--quick] [--pipeline default|hashed] [--shared-kb]
        [--servers 1,2] [--workers 1,2,4] [--users 8] [--duration 30] [--warmup 5] [--pg-admin-url URL]
        [--database ragloop_scaling] [--kb-database ragloop_scaling_kb] [--home-root DIR]
        [--redis-url redis://127.0.0.1:6379/11]

For every (servers, workers) pair, from scratch:

1. A fresh PostgreSQL database (`--database`, dropped and created) and the Redis database
   given by `--redis-url` emptied (the benchmark owns it: tier-1 features, rate limits and
   assignments cached by one run must not help the next).
2. The servers start with `--no-worker`, each with its own `RAGLOOP_HOME` holding the MTRAG-UN
   corpus (858 passages) ingested with the pipeline, and the workers start beside them; all share
   the database and Redis (`RAGLOOP_DATABASE_URL`, `RAGLOOP_REDIS_URL`). `--pipeline default`: the
   offline pipeline (MiniLM + BM25, embedding scorers and judge; the embedding cache is the
   benchmarks' shared one). `--pipeline hashed`: the same graph with the hashed test embedder and
   lexical scorers and judge, no neural model anywhere, so what is measured is the fleet itself
   (HTTP, graph, PostgreSQL writes, the queue, Redis), not MiniLM's CPU.
   `--shared-kb` (the deployment the README describes): ONE collection in PostgreSQL
   (`RAGLOOP_COLLECTIONS_URL` = the `--kb-database`, kept across pairs and runs), ingested once
   before the pairs, every server and worker reading it, and the embedding cache in the same
   database (`RAGLOOP_EMBEDDING_CACHE_URL`), so a rerun embeds nothing and the passage vectors the
   scorers read are there for every process; each process still has its own empty `RAGLOOP_HOME`
   under `--home-root`.
3. A short warm-up per server (models load, caches fill), then `--users` simulated users, spread
   round-robin over the servers, each replaying MTRAG-UN conversations turn by turn in one session
   (`POST /v1/query`), closed loop, for `--duration` seconds.
4. Reported: answers/s, p50/p99 latency, errors, the evaluation lag (age of the oldest unfinished
   tier-1/tier-2 job, sampled every second from `/metrics`), seconds to drain the queue after the
   load, and the audit of the database: every answer a user received is stored with exactly one
   tier-1 evaluation ("lost" and "duplicate tier-1" must be 0). Per pair also: the load average
   before and after the load phase, and the CPU seconds the servers and the workers used per answer
   during it (the figure a shared machine distorts least: wall time waits for the CPU, CPU time
   mostly does not).

`--quick` (the hashed pipeline, 4 users, 12 s per pair) finishes in a few minutes on a loaded two-core
machine; its numbers are the quick size's, not the full run's. Writes `benchmarks/results/load_scaling.{json,md}`
(`load_scaling_quick.*` for `--quick`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _common import BENCH_HOME, machine, print_table, write_results
from _scaling_db import audit, connections, cpu_seconds, drain, ensure_database, fresh_state
from load import RAGLOOP, Level, free_port, sample_metrics, stop, user

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.datasets import MtragTask, load_mtrag
from ragloop.retrieval.collection import Collection

SCALING_HOME = BENCH_HOME / "scaling"
DESCRIBE = {
    "default": "offline: MiniLM + BM25 hybrid, extractive answers, embedding scorers and judge",
    "hashed": "the offline graph with the hashed test embedder, lexical scorers and judge: no neural model",
}
HEADERS = [
    "servers",
    "workers",
    "answers",
    "answers/s",
    "p50 ms",
    "p99 ms",
    "errors",
    "eval lag max s",
    "eval lag mean s",
    "drain s",
    "lost",
    "dup tier-1",
    "PG conns",
    "server CPU ms/answer",
    "worker CPU ms/answer",
    "load avg before/after",
]


@dataclass
class Fleet:
    servers: list[subprocess.Popen[bytes]]
    workers: list[subprocess.Popen[bytes]]
    bases: list[str]


HOMES = [SCALING_HOME / "default"]
"""Where this run's homes live (set by main): each pipeline has its own, so neither re-ingests for the
other; with `--shared-kb` they hold no collection at all."""


def home(i: int) -> Path:
    return HOMES[0] / f"home-{i}"


def prepare_shared(kb_url: str, config: PipelineConfig) -> dict[str, Any]:
    """The corpus ingested ONCE into the shared collection (incremental: a rerun compares hashes)."""
    ds = load_mtrag()
    corpus = BENCH_HOME / "corpora" / "mtrag-un"
    ds.write_corpus(corpus)
    ingester = HOMES[0] / "ingest"
    ingester.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    coll = Collection("default", Settings(home=ingester, collections_url=kb_url, embedding_cache_url=kb_url))
    summary = coll.ingest([corpus], config)
    coll.close()
    secs = time.perf_counter() - t0
    print(f"shared collection: {summary.chunks_total} chunks ({summary.chunks_embedded} embedded now) in {secs:.1f} s")
    return {
        "passages": len(ds.passages),
        "chunks": summary.chunks_total,
        "tasks": len(ds.tasks),
        "ingest_s": round(secs, 1),
        "chunks_embedded_now": summary.chunks_embedded,
    }


def prepare(n_homes: int, config: PipelineConfig) -> dict[str, Any]:
    """The corpus ingested into each server's home (incremental: a rerun only checks hashes)."""
    ds = load_mtrag()
    corpus = BENCH_HOME / "corpora" / "mtrag-un"
    ds.write_corpus(corpus)
    (BENCH_HOME / "cache").mkdir(parents=True, exist_ok=True)
    chunks = 0
    for i in range(n_homes):
        h = home(i)
        h.mkdir(parents=True, exist_ok=True)
        if not (h / "cache").exists():
            (h / "cache").symlink_to(BENCH_HOME / "cache", target_is_directory=True)
        t0 = time.perf_counter()
        coll = Collection("default", Settings(home=h))
        summary = coll.ingest([corpus], config)
        coll.close()
        chunks = summary.chunks_total
        print(f"home-{i}: {chunks} chunks ({summary.chunks_embedded} embedded now) in {time.perf_counter() - t0:.1f} s")
    return {"passages": len(ds.passages), "chunks": chunks, "tasks": len(ds.tasks)}


HASHED = PipelineConfig().with_overrides(
    retrieval={"dense": {"embedder": "test:hashed"}},
    agent={"scorers": {"grade": "lexical", "refine": "lexical", "support": "lexical"}},
)
LEXICAL = {"RAGLOOP_JUDGE": "lexical", "RAGLOOP_HEURISTIC_SUPPORT": "lexical"}
"""The hashed pipeline's worker scorers (tier-1 support check and tier-2 judge)."""


def env(h: Path, url: str, redis_url: str, extra: dict[str, str]) -> dict[str, str]:
    return dict(
        os.environ,
        RAGLOOP_HOME=str(h),
        RAGLOOP_DATABASE_URL=url,
        RAGLOOP_REDIS_URL=redis_url,
        RAGLOOP_BLOCK_REAL_CALLS="1",
        HF_HUB_OFFLINE="1",
        **extra,
    )


def launch(
    n_servers: int, n_workers: int, url: str, args: argparse.Namespace, logs: Path, config_file: Path | None
) -> Fleet:
    logs.mkdir(parents=True, exist_ok=True)
    redis_url = args.redis_url
    extra = dict(LEXICAL) if config_file is not None else {}
    if args.shared_kb:  # the one collection and embedding cache, for servers and workers alike
        extra |= {"RAGLOOP_COLLECTIONS_URL": args.kb_url, "RAGLOOP_EMBEDDING_CACHE_URL": args.kb_url}

    def start(cmd: list[str], name: str, h: Path) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.log").open("w") as fh:
            return subprocess.Popen(cmd, env=env(h, url, redis_url, extra), stdout=fh, stderr=subprocess.STDOUT)

    bases, servers = [], []
    for i in range(n_servers):
        port = free_port()
        bases.append(f"http://127.0.0.1:{port}")
        cmd = [
            str(RAGLOOP),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-worker",
            "--log-level",
            "warning",
        ]
        if config_file is not None:
            cmd += ["--config", str(config_file)]
        servers.append(start(cmd, f"serve{i}", home(i)))
    workers = [
        start([str(RAGLOOP), "worker", "--log-level", "warning"], f"worker{i}", worker_home(i, args.shared_kb))
        for i in range(n_workers)
    ]
    fleet = Fleet(servers, workers, bases)
    t0 = time.monotonic()
    pending = set(bases)
    while pending and time.monotonic() - t0 < 300:
        for p in servers + workers:
            if p.poll() is not None:
                raise SystemExit(f"a process exited at start-up (logs: {logs})")
        for b in list(pending):
            try:
                if httpx.get(b + "/readyz", timeout=10).status_code == 200:
                    pending.discard(b)
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    if pending:
        raise SystemExit(f"servers not ready within 300 s (logs: {logs})")
    print(f"  {n_servers} server(s) + {n_workers} worker(s) ready in {time.monotonic() - t0:.1f} s", flush=True)
    return fleet


def worker_home(i: int, shared_kb: bool) -> Path:
    """Per-home collections: the workers read server 0's. Shared: each worker its own empty home."""
    if not shared_kb:
        return home(0)
    h = HOMES[0] / f"worker-home-{i}"
    h.mkdir(parents=True, exist_ok=True)
    return h


async def replay(bases: list[str], key: str, admin_key: str, tasks: list[MtragTask], users: int, secs: float) -> Level:
    """`users` closed-loop users, user i on server i mod len(bases); the lag sampled on the first."""
    level = Level(users)
    headers = {"Authorization": f"Bearer {key}"}
    convs = itertools.cycle(tasks)
    limits = httpx.Limits(max_connections=users + 4)
    clients = [httpx.AsyncClient(base_url=b, timeout=60, limits=limits) for b in bases]
    try:
        done = asyncio.Event()
        sampler = asyncio.create_task(sample_metrics(clients[0], admin_key, level, done))
        t0 = time.monotonic()
        deadline = t0 + secs
        await asyncio.gather(
            *(user(clients[i % len(clients)], headers, convs, level, deadline, i) for i in range(users))
        )
        level.seconds = time.monotonic() - t0
        done.set()
        await sampler
    finally:
        for c in clients:
            await c.aclose()
    return level


def p99_ci_ms(lat_ms: np.ndarray) -> list[float]:
    """95% distribution-free CI of the p99: order statistics at n*q -/+ 1.96*sqrt(n*q*(1-q))."""
    n = len(lat_ms)
    srt = np.sort(lat_ms)
    half = 1.96 * np.sqrt(n * 0.99 * 0.01)
    lo, hi = int(np.floor(n * 0.99 - half)), int(np.ceil(n * 0.99 + half))
    return [round(float(srt[max(0, lo - 1)]), 1), round(float(srt[min(n - 1, hi - 1)]), 1)]


def run_pair(args: argparse.Namespace, n_servers: int, n_workers: int, tasks: list[MtragTask]) -> dict[str, Any]:
    from ragloop.store import Store

    url = fresh_state(args.pg_admin_url, args.database, args.redis_url)
    with Store.open(url) as store:  # migrated here, before the fleet races for it
        key = store.api_keys.create_api_key("user", name="scaling", rate_limit_per_minute=1_000_000).key
        admin_key = store.api_keys.create_api_key("admin", name="scaling-admin", rate_limit_per_minute=1_000_000).key
    logs = HOMES[0] / "logs" / f"s{n_servers}-w{n_workers}"
    fleet = launch(n_servers, n_workers, url, args, logs, args.config_file)
    served: list[str] = []
    try:
        warm = asyncio.run(replay(fleet.bases, key, admin_key, tasks[-8:], n_servers, args.warmup))
        served += warm.answer_ids
        drain(url, 120.0)
        load_before = [round(x, 2) for x in os.getloadavg()]
        cpu0 = [cpu_seconds(p.pid) for p in fleet.servers], [cpu_seconds(p.pid) for p in fleet.workers]
        level = asyncio.run(replay(fleet.bases, key, admin_key, tasks, args.users, args.duration))
        drained = drain(url, args.drain_timeout)  # the workers' CPU for this load includes its drain
        cpu1 = [cpu_seconds(p.pid) for p in fleet.servers], [cpu_seconds(p.pid) for p in fleet.workers]
        load_after = [round(x, 2) for x in os.getloadavg()]
        served += level.answer_ids
        held = connections(args.pg_admin_url, [args.database] + ([args.kb_database] if args.shared_kb else []))
    finally:
        codes = [stop(p) for p in fleet.servers + fleet.workers]
    n_ok = max(1, len(level.latencies))
    server_cpu, worker_cpu = (sum(b) - sum(a) for a, b in zip(cpu0, cpu1, strict=True))
    lat = np.asarray(level.latencies or [0.0]) * 1000
    n_err = sum(level.errors.values())
    row = {
        "servers": n_servers,
        "workers": n_workers,
        "users": args.users,
        "answers": len(level.latencies),
        "answers_per_s": round(len(level.latencies) / level.seconds, 2) if level.seconds else 0.0,
        "p50_ms": round(float(np.percentile(lat, 50)), 1),
        "p99_ms": round(float(np.percentile(lat, 99)), 1),
        "p99_ci95_ms": p99_ci_ms(lat),
        "error_rate": round(n_err / max(1, n_err + len(level.latencies)), 4),
        "errors": dict(level.errors),
        "eval_lag_max_s": round(max(level.lag, default=0.0), 2),
        "eval_lag_mean_s": round(float(np.mean(level.lag)) if level.lag else 0.0, 2),
        "queue_depth_max": int(max(level.depth, default=0)),
        "drain_s": round(drained, 1),
        "pg_connections": held,
        "server_cpu_ms_per_answer": round(1000 * server_cpu / n_ok, 1),
        "worker_cpu_ms_per_answer": round(1000 * worker_cpu / n_ok, 1),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "exit_codes": codes,
        **audit(url, served),
    }
    print(
        f"  {row['answers_per_s']} answers/s, p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, "
        f"lag max {row['eval_lag_max_s']} s, drain {row['drain_s']} s, lost {row['lost_answers'] + row['lost_tier1']}, "
        f"dup {row['duplicate_tier1']}, load {load_before[0]} -> {load_after[0]}",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 users, 12 s per pair (a few minutes in all)")
    parser.add_argument("--pipeline", choices=("default", "hashed"), default=None, help="default: hashed with --quick")
    parser.add_argument(
        "--shared-kb", action="store_true", help="one collection + embedding cache in --kb-database for every process"
    )
    parser.add_argument("--servers", default="1,2")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--pg-admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--database", default="ragloop_scaling", help="the service database, recreated per pair")
    parser.add_argument("--kb-database", default="ragloop_scaling_kb", help="--shared-kb: kept across pairs and runs")
    parser.add_argument("--home-root", type=Path, default=None, help=f"the processes' homes (default {SCALING_HOME})")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11", help="a Redis db the benchmark owns")
    args = parser.parse_args()
    if args.quick:
        args.users, args.duration, args.warmup = 4, 12.0, 3.0
    args.pipeline = args.pipeline or ("hashed" if args.quick else "default")
    HOMES[0] = (args.home_root or SCALING_HOME) / (f"{args.pipeline}-shared" if args.shared_kb else args.pipeline)
    server_counts = [int(x) for x in args.servers.split(",") if x.strip()]
    worker_counts = [int(x) for x in args.workers.split(",") if x.strip()]
    config = HASHED if args.pipeline == "hashed" else PipelineConfig()
    args.config_file = None
    if args.pipeline == "hashed":
        import yaml

        SCALING_HOME.mkdir(parents=True, exist_ok=True)
        args.config_file = SCALING_HOME / "hashed.yaml"
        args.config_file.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True)))
    if args.shared_kb:
        args.kb_url = ensure_database(args.pg_admin_url, args.kb_database)
        corpus = prepare_shared(args.kb_url, config)
        for i in range(max(server_counts)):
            home(i).mkdir(parents=True, exist_ok=True)
    else:
        corpus = prepare(max(server_counts), config)
    tasks = sorted(load_mtrag().tasks, key=lambda t: (len(t.user_turns()), t.task_id))
    tasks = tasks[::2] + tasks[1::2][::-1]  # interleave conversation lengths
    rows = []
    for s in server_counts:
        for w in worker_counts:
            print(f"{s} server(s), {w} worker(s)", flush=True)
            rows.append(run_pair(args, s, w, tasks))
    size = "quick" if args.quick else "full"
    md = [
        f"# Scale-out: MTRAG-UN load replay on PostgreSQL + Redis ({size} size)\n",
        f"Pipeline `{config.version_id}` ({DESCRIBE[args.pipeline]}), "
        f"{corpus['passages']} passages / {corpus['chunks']} chunks "
        + (
            f"in ONE collection on PostgreSQL (`RAGLOOP_COLLECTIONS_URL`, database `{args.kb_database}`, with the "
            f"embedding cache), ingested once ({corpus['ingest_s']} s, {corpus['chunks_embedded_now']} chunks "
            "embedded then), every server and worker reading it; "
            if args.shared_kb
            else "in each server's home; "
        )
        + f"Redis `{args.redis_url}`; "
        f"{args.users} closed-loop users spread over the servers, {args.duration:.0f} s per pair after a "
        f"{args.warmup:.0f} s warm-up; a fresh database and Redis db per pair. Machine: {os.cpu_count()} CPUs, "
        f"load average at the end {machine()['load_average_1_5_15']} (shared: other jobs ran alongside; "
        "the per-pair load averages are in the last column).\n",
        f"Command: `{' '.join(['.venv/bin/python', 'benchmarks/load_scaling.py', *sys.argv[1:]])}`\n",
        print_table(
            "Throughput, latency, evaluation lag, durability per (servers, workers)",
            HEADERS,
            [
                [
                    r["servers"],
                    r["workers"],
                    r["answers"],
                    r["answers_per_s"],
                    r["p50_ms"],
                    r["p99_ms"],
                    f"{r['error_rate']:.2%}",
                    r["eval_lag_max_s"],
                    r["eval_lag_mean_s"],
                    r["drain_s"],
                    r["lost_answers"] + r["lost_tier1"],
                    r["duplicate_tier1"],
                    r["pg_connections"],
                    r["server_cpu_ms_per_answer"],
                    r["worker_cpu_ms_per_answer"],
                    f"{r['load_average_before'][0]} / {r['load_average_after'][0]}",
                ]
                for r in rows
            ],
        ),
    ]
    write_results(
        "load_scaling_quick" if args.quick else ("load_scaling" if args.shared_kb else "load_scaling_per_home"),
        {
            "machine": machine(),
            "size": size,
            "config": {
                "pipeline": args.pipeline,
                "pipeline_version": config.version_id,
                "shared_kb": args.shared_kb,
                "command": " ".join(["benchmarks/load_scaling.py", *sys.argv[1:]]),
                "users": args.users,
                "duration_s": args.duration,
                "warmup_s": args.warmup,
                "servers": server_counts,
                "workers": worker_counts,
            },
            "corpus": corpus,
            "runs": rows,
        },
        "\n".join(md),
    )


if __name__ == "__main__":
    main()
