"""Load on `ragloop serve` (127.0.0.1 only): MTRAG-UN dev conversations replayed turn by turn.

    .venv/bin/python benchmarks/load.py [--concurrency 1,2,4,8] [--duration 30] [--workers 0] [--local-judge 1]

1. The MTRAG-UN corpus (858 passages) is ingested into the collection `default` under
   `benchmarks/.home/load/` with the default (offline) pipeline; the embedding cache is shared with
   the other benchmarks, so after `retrieval_quality.py` nothing is embedded again.
2. `ragloop serve` starts on a free loopback port with a fresh database and its embedded evaluation
   worker (or, with `--workers N`, with `--no-worker` and N `ragloop worker` processes).
3. For each concurrency level, that many simulated users each take the next conversation and send
   its user turns one after another in one session (`POST /v1/query`), closed loop, for
   `--duration` seconds; then no new turn starts and in-flight ones finish. Reported per level:
   sustained QPS (answers / wall time), p50/p95/p99 latency, error rate, and the evaluation lag
   (age of the oldest unfinished evaluation job, sampled every second from `/metrics`).
4. After the last level the queue is drained (bounded wait) and the database is audited: every
   answer served must be stored and have exactly one tier-1 evaluation ("lost" counts those that
   do not); tier-2 completion time is measured from the answer to its judge evaluation.
5. Tier-1 feature cost is timed in-process on the stored payloads of the answers just served
   (real MTRAG questions, answers and contexts): the cheap features alone, and with the support
   check (the embedding scorer).
6. The tier-2 `ChatJudge` is timed with a local model (`--local-judge N`, default 1, on
   `local:qwen2.5-coder-1.5b`; 0 skips it) on answers that were routed to tier 2, and its
   judgements per second are set against the tier-2 arrival rate at the sustained load.

Everything stops by itself (the local judge has a 240 s budget). Writes `benchmarks/results/load.{json,md}`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _common import BENCH_HOME, REPO, machine, print_table, write_results
from _scaling_db import drain

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.datasets import MtragTask, load_mtrag
from ragloop.retrieval.collection import Collection

RAGLOOP = Path(sys.executable).parent / "ragloop"
LOAD_HOME = BENCH_HOME / "load"
LAG_RE = re.compile(r"^ragloop_evaluation_lag_seconds ([0-9.e+-]+)$", re.M)
COST_HEADERS = [
    "answers",
    "cheap p50 ms",
    "cheap p99 ms",
    "cheap p99 ms (best of 5)",
    "with support p50 ms",
    "with support p99 ms",
    "scorer",
]
DEPTH_RE = re.compile(r"^ragloop_evaluation_queue_depth ([0-9.e+-]+)$", re.M)


@dataclass
class Level:
    concurrency: int
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    answer_ids: list[str] = field(default_factory=list)
    lag: list[float] = field(default_factory=list)
    depth: list[float] = field(default_factory=list)
    seconds: float = 0.0
    conversations: int = 0

    def row(self) -> dict[str, Any]:
        lat = np.asarray(self.latencies) * 1000 if self.latencies else np.zeros(1)
        n_err = sum(self.errors.values())
        total = len(self.latencies) + n_err
        return {
            "concurrency": self.concurrency,
            "requests": total,
            "conversations": self.conversations,
            "qps": round(len(self.latencies) / self.seconds, 2) if self.seconds else 0.0,
            "p50_ms": round(float(np.percentile(lat, 50)), 1),
            "p95_ms": round(float(np.percentile(lat, 95)), 1),
            "p99_ms": round(float(np.percentile(lat, 99)), 1),
            "max_ms": round(float(lat.max()), 1),
            "error_rate": round(n_err / total, 4) if total else 0.0,
            "errors": dict(self.errors),
            "eval_lag_max_s": round(max(self.lag, default=0.0), 2),
            "eval_lag_mean_s": round(float(np.mean(self.lag)) if self.lag else 0.0, 2),
            "queue_depth_max": int(max(self.depth, default=0)),
        }


def prepare(settings: Settings, config: PipelineConfig) -> dict[str, Any]:
    """A fresh service home (database, checkpoints) whose embedding cache is the benchmarks' shared one."""
    if LOAD_HOME.exists():
        shutil.rmtree(LOAD_HOME)
    (BENCH_HOME / "cache").mkdir(parents=True, exist_ok=True)
    LOAD_HOME.mkdir(parents=True)
    (LOAD_HOME / "cache").symlink_to(BENCH_HOME / "cache", target_is_directory=True)
    ds = load_mtrag()
    corpus = BENCH_HOME / "corpora" / "mtrag-un"
    ds.write_corpus(corpus)
    coll = Collection("default", settings)
    t0 = time.perf_counter()
    summary = coll.ingest([corpus], config)
    coll.close()
    print(
        f"collection default: {summary.chunks_total} chunks ({summary.chunks_embedded} embedded now) "
        f"in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    return {"passages": len(ds.passages), "chunks": summary.chunks_total, "tasks": len(ds.tasks)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env() -> dict[str, str]:
    e = dict(os.environ, RAGLOOP_HOME=str(LOAD_HOME), RAGLOOP_BLOCK_REAL_CALLS="1", HF_HUB_OFFLINE="1")
    e.pop("RAGLOOP_DATABASE_URL", None)
    return e


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as fh:
        return subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=fh, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def make_key(role: str = "user") -> str:
    from ragloop.store import Store

    with Store.open(f"sqlite:///{LOAD_HOME / 'ragloop.db'}") as store:
        return store.api_keys.create_api_key(role, name=f"load-{role}", rate_limit_per_minute=1_000_000).key


async def user(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    convs: itertools.cycle[MtragTask],
    level: Level,
    deadline: float,
    uid: int,
) -> None:
    n = 0
    while time.monotonic() < deadline:
        task = next(convs)
        level.conversations += 1
        session = f"c{level.concurrency}-u{uid}-{n}-{task.conversation_id[:12]}"
        n += 1
        for turn in task.user_turns():
            if time.monotonic() >= deadline:
                return
            body = {"question": turn.strip()[:4000] or "?", "session_id": session}
            t0 = time.perf_counter()
            try:
                r = await client.post("/v1/query", json=body, headers=headers)
            except httpx.HTTPError as exc:
                key = type(exc).__name__
                level.errors[key] = level.errors.get(key, 0) + 1
                continue
            elapsed = time.perf_counter() - t0
            if r.status_code == 200:
                level.latencies.append(elapsed)
                level.answer_ids.append(r.json()["answer_id"])
            else:
                key = str(r.status_code)
                level.errors[key] = level.errors.get(key, 0) + 1


async def sample_metrics(client: httpx.AsyncClient, admin_key: str, level: Level, until: asyncio.Event) -> None:
    while not until.is_set():
        try:
            text = (await client.get("/metrics", headers={"Authorization": f"Bearer {admin_key}"})).text
            if m := LAG_RE.search(text):
                level.lag.append(float(m.group(1)))
            if m := DEPTH_RE.search(text):
                level.depth.append(float(m.group(1)))
        except httpx.HTTPError:
            pass
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(until.wait(), timeout=1.0)


async def run_level(
    base: str, key: str, admin_key: str, tasks: list[MtragTask], concurrency: int, duration: float
) -> Level:
    level = Level(concurrency)
    headers = {"Authorization": f"Bearer {key}"}
    convs = itertools.cycle(tasks)
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        done = asyncio.Event()
        sampler = asyncio.create_task(sample_metrics(client, admin_key, level, done))
        t0 = time.monotonic()
        deadline = t0 + duration
        await asyncio.gather(*(user(client, headers, convs, level, deadline, i) for i in range(concurrency)))
        level.seconds = time.monotonic() - t0
        done.set()
        await sampler
    return level


def audit(served: list[str]) -> dict[str, Any]:
    from sqlalchemy import select

    from ragloop.store import Answer, Evaluation, Store

    with (
        Store.open(f"sqlite:///{LOAD_HOME / 'ragloop.db'}", migrate=False) as store,
        store.db.transaction(write=False) as s,
    ):
        stored = {a: t for a, t in s.execute(select(Answer.answer_id, Answer.created_at))}
        evals = s.execute(
            select(Evaluation.answer_id, Evaluation.evaluation_tier, Evaluation.status, Evaluation.evaluated_at)
        ).all()
        stats = store.queue.stats()
    tier1: dict[str, int] = {}
    tier2_delay: list[float] = []
    tier2_failed = 0
    for answer_id, tier, status, at in evals:
        if tier == "heuristic":
            tier1[answer_id] = tier1.get(answer_id, 0) + 1
        elif tier == "llm_judge":
            if status == "failed":
                tier2_failed += 1
            elif answer_id in stored:
                tier2_delay.append((at - stored[answer_id]).total_seconds())
    not_stored = [a for a in served if a not in stored]
    no_tier1 = [a for a in served if a in stored and tier1.get(a, 0) == 0]
    duplicated = [a for a, n in tier1.items() if n > 1]
    delay = np.asarray(tier2_delay) if tier2_delay else np.zeros(1)
    return {
        "answers_served": len(served),
        "answers_stored": len(stored),
        "lost_answers": len(not_stored),
        "lost_evaluations": len(no_tier1),
        "duplicate_tier1": len(duplicated),
        "tier2_evaluations": len(tier2_delay),
        "tier2_failed": tier2_failed,
        "tier2_share": round(len(tier2_delay) / max(1, len(stored)), 3),
        "tier2_completion_p50_s": round(float(np.percentile(delay, 50)), 2),
        "tier2_completion_p95_s": round(float(np.percentile(delay, 95)), 2),
        "tier2_within_60s": round(float(np.mean(delay <= 60.0)), 4) if tier2_delay else None,
        "queue_after": stats.counts,
        "dead_letters": stats.counts.get("dead", 0),
    }


def tier1_cost(settings: Settings, limit: int = 400, repeats: int = 5) -> dict[str, Any]:
    """Per-answer cost of the tier-1 features on real payloads: cheap features, then with the support check."""
    from sqlalchemy import select

    from ragloop.improve.payload import EvaluationPayload
    from ragloop.improve.tier1 import PRIOR, cheap_features, compute_features
    from ragloop.models.scoring import make_scorer
    from ragloop.store import EvaluationJob, Store

    with (
        Store.open(f"sqlite:///{LOAD_HOME / 'ragloop.db'}", migrate=False) as store,
        store.db.transaction(write=False) as s,
    ):
        payloads = [
            p for p in s.scalars(select(EvaluationJob.payload).where(EvaluationJob.tier == "heuristic").limit(limit))
        ]
    items = [EvaluationPayload.load(p).tier1_input() for p in payloads]
    if not items:
        return {}
    # each answer `repeats` times: the raw distribution carries this shared machine's preemptions; the
    # best of the repeats per answer is the cost of the code itself
    per_item = np.zeros((repeats, len(items)))
    for r in range(repeats):
        for i, it in enumerate(items):
            t0 = time.perf_counter()
            f = cheap_features(it)
            PRIOR.score(f.values)
            per_item[r, i] = time.perf_counter() - t0
    cheap = per_item.ravel()
    best = per_item.min(axis=0) * 1000
    scorer = make_scorer("embedding:minilm", settings)

    async def with_support() -> list[float]:
        out = []
        for it in items:
            t0 = time.perf_counter()
            f = await compute_features(it, scorer)
            PRIOR.score(f.values)
            out.append(time.perf_counter() - t0)
        return out

    full = asyncio.run(with_support())
    c = np.asarray(cheap) * 1000
    s_ = np.asarray(full) * 1000
    return {
        "answers": len(items),
        "cheap_p50_ms": round(float(np.percentile(c, 50)), 3),
        "cheap_p99_ms": round(float(np.percentile(c, 99)), 3),
        "cheap_max_ms": round(float(c.max()), 3),
        "cheap_best_of_repeats_p99_ms": round(float(np.percentile(best, 99)), 3),
        "repeats": repeats,
        "with_support_p50_ms": round(float(np.percentile(s_, 50)), 2),
        "with_support_p99_ms": round(float(np.percentile(s_, 99)), 2),
        "support_scorer": scorer.name,
    }


def local_judge(settings: Settings, n: int, model: str, budget_s: float = 240.0) -> dict[str, Any]:
    """Time the tier-2 `ChatJudge` with a local model on `n` answers that were routed to tier 2, and
    compare its capacity with the tier-2 arrival rate measured under load."""
    from sqlalchemy import select

    from ragloop.improve.judge import make_judge
    from ragloop.improve.payload import EvaluationPayload
    from ragloop.store import EvaluationJob, Store

    with (
        Store.open(f"sqlite:///{LOAD_HOME / 'ragloop.db'}", migrate=False) as store,
        store.db.transaction(write=False) as s,
    ):
        payloads = list(s.scalars(select(EvaluationJob.payload).where(EvaluationJob.tier == "llm_judge").limit(n)))
    try:
        judge = make_judge(f"chat:{model}", settings)
    except Exception as exc:
        return {"model": model, "error": f"{type(exc).__name__}: {exc}"}

    async def go() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        t_start = time.perf_counter()
        for p in payloads:
            if time.perf_counter() - t_start > budget_s:
                break
            item = dataclasses.replace(EvaluationPayload.load(p).judge_input(), reference=None)
            t0 = time.perf_counter()
            try:
                r = await judge.evaluate(item)
                out.append({"seconds": time.perf_counter() - t0, "scores": r.scores, "ok": True})
            except Exception as exc:
                out.append({"seconds": time.perf_counter() - t0, "ok": False, "error": f"{type(exc).__name__}"})
        await judge.aclose()
        return out

    runs = asyncio.run(go())
    secs = [r["seconds"] for r in runs]
    return {
        "model": model,
        "evaluations": len(runs),
        "ok": sum(r["ok"] for r in runs),
        "mean_s": round(float(np.mean(secs)), 1) if secs else None,
        "max_s": round(float(np.max(secs)), 1) if secs else None,
        "per_second": round(1.0 / float(np.mean(secs)), 3) if secs else None,
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,2,4,8", help="comma-separated levels")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per level")
    parser.add_argument("--workers", type=int, default=0, help="0: embedded worker; N: N `ragloop worker` processes")
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--local-judge", type=int, default=1, help="time the local chat judge on N routed answers")
    parser.add_argument("--local-judge-model", default="local:qwen2.5-coder-1.5b")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    settings = Settings(home=LOAD_HOME)
    config = PipelineConfig()
    corpus = prepare(settings, config)
    tasks = sorted(load_mtrag().tasks, key=lambda t: (len(t.user_turns()), t.task_id))
    # the longest conversations first would make early levels unrepresentative: interleave lengths
    tasks = tasks[::2] + tasks[1::2][::-1]
    key, admin_key = make_key(), make_key("admin")  # /metrics needs an admin key
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logs = LOAD_HOME / "logs"
    logs.mkdir()
    serve_cmd = [str(RAGLOOP), "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    if args.workers:
        serve_cmd.append("--no-worker")
    server = start(serve_cmd, logs / "serve.log")
    workers = [
        start([str(RAGLOOP), "worker", "--log-level", "warning"], logs / f"worker{i}.log") for i in range(args.workers)
    ]
    results: list[dict[str, Any]] = []
    served: list[str] = []
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            try:
                if httpx.get(base + "/readyz", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None:
                raise SystemExit(f"ragloop serve exited: {(logs / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.5)
        else:
            raise SystemExit("ragloop serve was not ready within 120 s")
        print(f"server ready in {time.monotonic() - t0:.1f} s at {base}", flush=True)
        warm = asyncio.run(run_level(base, key, admin_key, tasks[-5:], 1, 5.0))  # load models, fill caches
        served += warm.answer_ids
        for c in levels:
            level = asyncio.run(run_level(base, key, admin_key, tasks, c, args.duration))
            served += level.answer_ids
            row = level.row()
            results.append(row)
            print(
                f"concurrency {c}: {row['qps']} QPS, p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, "
                f"errors {row['error_rate']:.2%}, lag max {row['eval_lag_max_s']} s",
                flush=True,
            )
        drained_s = drain(f"sqlite:///{LOAD_HOME / 'ragloop.db'}", args.drain_timeout)
        print(f"evaluation queue drained {drained_s:.1f} s after the last request", flush=True)
    finally:
        codes = {"serve": stop(server), **{f"worker{i}": stop(w) for i, w in enumerate(workers)}}
    report = audit(served)
    report["drain_seconds_after_load"] = round(drained_s, 1)
    report["exit_codes"] = codes
    cost = tier1_cost(settings)
    judge_local = local_judge(settings, args.local_judge, args.local_judge_model) if args.local_judge else {}
    sustained = max(
        (r for r in results if r["p99_ms"] < 3000 and r["error_rate"] == 0), key=lambda r: r["qps"], default=None
    )
    if judge_local.get("per_second") and sustained:
        arrival = sustained["qps"] * report["tier2_share"]
        judge_local["tier2_arrivals_per_second_at_sustained_load"] = round(arrival, 3)
        judge_local["keeps_up"] = judge_local["per_second"] >= arrival

    md = [
        "# Load: MTRAG-UN dev conversations replayed against `ragloop serve` (127.0.0.1)\n",
        f"Offline pipeline (pipeline `{config.version_id}`: MiniLM + BM25 hybrid, extractive answers, embedding "
        f"scorers), {corpus['passages']} passages / {corpus['chunks']} chunks; "
        f"{'embedded worker' if not args.workers else f'{args.workers} worker processes'}; "
        f"{args.duration:.0f} s per level, closed loop (each user replays a conversation turn by turn). "
        f"Machine: {os.cpu_count()} CPUs, load average at the end {machine()['load_average_1_5_15']} "
        "(a shared machine: other jobs ran alongside).\n",
    ]
    md.append(
        print_table(
            "Latency and throughput per concurrency level (target: p99 < 3 s, 0 errors)",
            [
                "users",
                "requests",
                "QPS",
                "p50 ms",
                "p95 ms",
                "p99 ms",
                "max ms",
                "errors",
                "eval lag max s",
                "queue max",
            ],
            [
                [
                    r["concurrency"],
                    r["requests"],
                    r["qps"],
                    r["p50_ms"],
                    r["p95_ms"],
                    r["p99_ms"],
                    r["max_ms"],
                    f"{r['error_rate']:.2%}",
                    r["eval_lag_max_s"],
                    r["queue_depth_max"],
                ]
                for r in results
            ],
        )
    )
    md.append(
        print_table(
            "Durable evaluation (target: 0 lost; tier 2 within 60 s)",
            [
                "served",
                "stored",
                "lost answers",
                "lost tier-1",
                "duplicate tier-1",
                "tier-2 done",
                "tier-2 failed",
                "tier-2 p95 s",
                "tier-2 ≤ 60 s",
                "drain s",
            ],
            [
                [
                    report["answers_served"],
                    report["answers_stored"],
                    report["lost_answers"],
                    report["lost_evaluations"],
                    report["duplicate_tier1"],
                    report["tier2_evaluations"],
                    report["tier2_failed"],
                    report["tier2_completion_p95_s"],
                    report["tier2_within_60s"],
                    report["drain_seconds_after_load"],
                ]
            ],
        )
    )
    if cost:
        md.append(
            print_table(
                "Tier-1 feature cost per answer (target: < 1 ms p99 without the support check)",
                COST_HEADERS,
                [
                    [
                        cost["answers"],
                        cost["cheap_p50_ms"],
                        cost["cheap_p99_ms"],
                        cost["cheap_best_of_repeats_p99_ms"],
                        cost["with_support_p50_ms"],
                        cost["with_support_p99_ms"],
                        cost["support_scorer"],
                    ]
                ],
            )
        )
    if judge_local.get("evaluations"):
        md.append(
            print_table(
                "Tier-2 judge on a local model (ChatJudge, one structured prompt per answer)",
                ["model", "evaluations", "valid", "mean s", "max s", "judgements/s", "tier-2 arrivals/s", "keeps up"],
                [
                    [
                        judge_local["model"],
                        judge_local["evaluations"],
                        judge_local["ok"],
                        judge_local["mean_s"],
                        judge_local["max_s"],
                        judge_local["per_second"],
                        judge_local.get("tier2_arrivals_per_second_at_sustained_load"),
                        judge_local.get("keeps_up"),
                    ]
                ],
            )
        )
    write_results(
        "load",
        {
            "machine": machine(),
            "config": {
                "pipeline_version": config.version_id,
                "concurrency": levels,
                "duration_s": args.duration,
                "workers": args.workers,
            },
            "corpus": corpus,
            "levels": results,
            "evaluation": report,
            "tier1_cost": cost,
            "local_judge": judge_local,
            "sustained": sustained,
        },
        "\n".join(md),
    )


if __name__ == "__main__":
    main()
