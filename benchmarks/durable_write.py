"""What storing the answer before the response costs on the query path (issue 11 §1), SQLite and PostgreSQL.

    .venv/bin/python benchmarks/durable_write.py [--n 40] [--concurrency 1,4] [--engines sqlite,postgresql]

The service stores each answer and its tier-1 job (one transaction) *before* it hands out the
answer id (`ragloop.service.recorder`). Before issue 11 the write was scheduled after the response.
This script measures both in the same run, in one process, on the same app and database:

- `durable`: the production recorder (the write is in the request's latency);
- `background`: the old behaviour, kept *only here* (`BackgroundRecorder` schedules the same
  write as a task and returns at once; its writes still run, overlapping the next requests).

Workload: the first SQuAD 2.0 dev article (its paragraphs as one JSON-lines corpus, the offline
default `PipelineConfig()`), its answerable questions in file order, each in a new session,
`POST /v1/query` over httpx's ASGI transport (the app's lifespan included, no network). Both
variants ask the same questions in the same order; they alternate in blocks of `--block` requests
(who goes first alternates too; background writes are drained, untimed, between blocks), after
one untimed pass over the questions (models, pools, caches), so drift on a shared machine hits
both alike. Per engine and
concurrency level: request latency p50/p95/p99 per variant; the durable requests less their own
awaited write (the same requests without the write: a paired view that drift cannot skew); and
the write alone (the thread's transaction, and the awaited `store_answer` including the hop to the
thread), which is exactly what each durable request waits for. p99 of a few dozen requests is
close to their maximum: read it as a tail, not a precise quantile.

PostgreSQL: `--pg-url` (default `RAGLOOP_TEST_POSTGRES_URL` or postgres@127.0.0.1:5432/test), in
a fresh schema dropped afterwards. State lives in `benchmarks/.home/durable_write/` (recreated;
the embedding cache is the benchmarks' shared one). Writes `benchmarks/results/durable_write.{json,md}`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from _common import BENCH_HOME, machine, print_table, write_results
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.datasets import SquadDataset, load_squad2
from ragloop.retrieval.collection import Collection
from ragloop.service import ServiceConfig, create_app
from ragloop.service.recorder import AnswerRecord, AnswerRecorder
from ragloop.store import Store

HOME = BENCH_HOME / "durable_write"
PG_DEFAULT = os.environ.get("RAGLOOP_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SERVICE = ServiceConfig(inprocess_worker=False, judge=None, heuristic_support=None, rate_limit_per_minute=10**6)
VARIANTS = {
    "background": "before: write after the response",
    "durable_less_its_write": "now, less its own write",
    "durable": "now: write before the response",
}
HEADERS = ["engine", "concurrency", "variant", "requests", "p50 ms", "p95 ms", "p99 ms", "mean ms"]


class BackgroundRecorder(AnswerRecorder):
    """The pre-issue-11 behaviour, for comparison only: the same write, scheduled, not awaited."""

    def __init__(self, base: AnswerRecorder) -> None:
        super().__init__(base.store, base.metrics, on_queued=base.on_queued, timeout_s=base.timeout_s)
        self.tasks: set[asyncio.Task[None]] = set()

    async def store_answer(self, rec: AnswerRecord) -> None:
        task = asyncio.get_running_loop().create_task(AnswerRecorder.store_answer(self, rec))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self) -> None:
        await asyncio.gather(*self.tasks)


@dataclass
class Timings:
    request_s: dict[str, list[float]] = field(default_factory=lambda: {"durable": [], "background": []})
    write_s: list[float] = field(default_factory=list)
    """The write transaction in its thread (durable variant)."""
    awaited_s: list[float] = field(default_factory=list)
    """`await store_answer(...)` as the request sees it (durable variant)."""
    without_write_s: list[float] = field(default_factory=list)
    """Each durable request's latency less its own awaited write: the same requests without the write."""
    awaited_by_session: dict[str, float] = field(default_factory=dict)


def timed_write(recorder: AnswerRecorder, sink: list[float]) -> None:
    """Instrument this recorder instance's thread-side write (benchmark only)."""
    inner: Callable[..., None] = recorder._write

    def write(*args: Any) -> None:
        t0 = time.perf_counter()
        try:
            inner(*args)
        finally:
            sink.append(time.perf_counter() - t0)

    recorder._write = write  # type: ignore[method-assign,assignment]


def corpus() -> tuple[SquadDataset, list[str]]:
    ds = load_squad2()
    title = ds.questions[0].title
    passages = tuple(p for p in ds.passages if p.doc_id.startswith(f"{title}_p"))
    questions = [q.question for q in ds.answerable() if q.title == title]
    return SquadDataset(passages, ()), questions


def prepare(settings: Settings, config: PipelineConfig) -> dict[str, Any]:
    if HOME.exists():
        shutil.rmtree(HOME)
    (BENCH_HOME / "cache").mkdir(parents=True, exist_ok=True)
    HOME.mkdir(parents=True)
    (HOME / "cache").symlink_to(BENCH_HOME / "cache", target_is_directory=True)
    ds, questions = corpus()
    path = ds.write_corpus(HOME / "corpus")
    coll = Collection("default", settings)
    t0 = time.perf_counter()
    summary = coll.ingest([path.parent], config)
    coll.close()
    print(f"collection default: {summary.chunks_total} chunks in {time.perf_counter() - t0:.1f} s", flush=True)
    return {"passages": len(ds.passages), "chunks": summary.chunks_total, "questions": questions}


def pg_schema(url: str) -> tuple[str, Callable[[], None]]:
    schema = f"bench_dw_{secrets.token_hex(4)}"
    admin = create_engine(url, poolclass=NullPool)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()

    scoped = make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
    return scoped.render_as_string(hide_password=False), drop


async def run_engine(
    settings: Settings, config: PipelineConfig, url: str, questions: list[str], levels: list[int], n: int, block: int
) -> dict[int, Timings]:
    store = Store.open(url)
    key = store.api_keys.create_api_key("user", name="bench", rate_limit_per_minute=10**6).key
    app = create_app(settings, store=store, config=config, service_config=SERVICE, worker=False)
    svc = app.state.service
    durable: AnswerRecorder = svc.recorder
    background = BackgroundRecorder(durable)
    out: dict[int, Timings] = {}
    asked = 0
    per_variant = {"durable": 0, "background": 0}  # both variants ask the same questions in the same order
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=120) as client:

                async def ask(variant: str, t: Timings) -> None:
                    nonlocal asked
                    q = questions[per_variant[variant] % len(questions)]
                    per_variant[variant] += 1
                    asked += 1
                    asked_now = asked
                    t0 = time.perf_counter()
                    r = await client.post(
                        "/v1/query",
                        json={"question": q, "session_id": f"dw{asked_now}"},
                        headers={"Authorization": f"Bearer {key}"},
                    )
                    elapsed = time.perf_counter() - t0
                    if r.status_code != 200:
                        raise SystemExit(f"{variant}: {r.status_code} {r.text[:300]}")
                    t.request_s[variant].append(elapsed)
                    if variant == "durable":
                        t.without_write_s.append(elapsed - t.awaited_by_session.pop(f"dw{asked_now}"))

                warm = Timings()
                for _ in range(min(n, len(questions))):  # models, pools, every question's caches: untimed
                    await ask("background", warm)
                await background.drain()
                per_variant["background"] = 0
                for c in levels:
                    t = out[c] = Timings()
                    original = durable.store_answer

                    async def awaited(rec: AnswerRecord, t: Timings = t, original: Any = original) -> None:
                        t0 = time.perf_counter()
                        await original(rec)
                        t.awaited_s.append(time.perf_counter() - t0)
                        t.awaited_by_session[rec.session_id.split(":", 1)[1]] = t.awaited_s[-1]

                    durable.store_answer = awaited  # type: ignore[method-assign]
                    timed_write(durable, t.write_s)
                    done = {"durable": 0, "background": 0}
                    order = ["durable", "background"]
                    while min(done.values()) < n:
                        for variant in order:
                            svc.recorder = durable if variant == "durable" else background
                            todo = min(block, n - done[variant])
                            for start in range(0, todo, c):
                                await asyncio.gather(*(ask(variant, t) for _ in range(min(c, todo - start))))
                            done[variant] += todo
                            await background.drain()
                        order.reverse()
                    del durable.store_answer, durable._write  # back to the class's methods
                    svc.recorder = durable
    finally:
        store.close()
    return out


def pct(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000.0
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p95_ms": round(float(np.percentile(ms, 95)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
        "mean_ms": round(float(ms.mean()), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=40, help="requests per variant and concurrency level")
    parser.add_argument("--concurrency", default="1,4", help="comma-separated levels")
    parser.add_argument("--block", type=int, default=4, help="requests per variant before switching")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default=PG_DEFAULT)
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    settings = Settings(home=HOME)
    config = PipelineConfig()
    info = prepare(settings, config)
    questions: list[str] = info.pop("questions")
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for engine in [e.strip() for e in args.engines.split(",") if e.strip()]:
        drop: Callable[[], None] | None = None
        if engine == "sqlite":
            url = f"sqlite:///{HOME / f'ragloop-{secrets.token_hex(3)}.db'}"
        else:
            url, drop = pg_schema(args.pg_url)
        try:
            t0 = time.perf_counter()
            results = asyncio.run(run_engine(settings, config, url, questions, levels, args.n, args.block))
            print(f"{engine}: {time.perf_counter() - t0:.0f} s", flush=True)
        finally:
            if drop is not None:
                drop()
        for c, t in results.items():
            before, after = pct(t.request_s["background"]), pct(t.request_s["durable"])
            without = pct(t.without_write_s)
            row = {
                "engine": engine,
                "concurrency": c,
                "requests_per_variant": len(t.request_s["durable"]),
                "background": before,
                "durable": after,
                "durable_less_its_write": without,
                "added_ms": {k: round(after[k] - before[k], 2) for k in before},
                "write_transaction": pct(t.write_s),
                "write_awaited": pct(t.awaited_s),
            }
            rows.append(row)
    md = ["# Durable answer write: the cost on the query path\n"]
    md.append(
        print_table(
            "Request latency: the old background write vs the durable write, and the durable requests less their write",
            HEADERS,
            [
                [r["engine"], r["concurrency"], VARIANTS[v], r["requests_per_variant"]]
                + [r[v][k] for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms")]
                for r in rows
                for v in VARIANTS
            ],
            digits=1,
        )
    )
    md.append(
        print_table(
            "The write alone (durable variant): the transaction in its thread, and as awaited by the request",
            ["engine", "concurrency", "what", "p50 ms", "p95 ms", "p99 ms", "mean ms"],
            [
                [r["engine"], r["concurrency"], what] + [r[key][k] for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms")]
                for r in rows
                for what, key in (("transaction", "write_transaction"), ("awaited", "write_awaited"))
            ],
            digits=2,
        )
    )
    md.append(
        print_table(
            "Summary (ms): request latency before / now, and what each request waits for its write",
            ["engine", "concurrency", "p50 before", "p50 now", "p99 before", "p99 now", "write p50", "write p99"],
            [
                [
                    r["engine"],
                    r["concurrency"],
                    r["background"]["p50_ms"],
                    r["durable"]["p50_ms"],
                    r["background"]["p99_ms"],
                    r["durable"]["p99_ms"],
                    r["write_awaited"]["p50_ms"],
                    r["write_awaited"]["p99_ms"],
                ]
                for r in rows
            ],
            digits=1,
        )
    )
    md.append(
        f"\nWorkload: {info['passages']} SQuAD 2.0 paragraphs ({info['chunks']} chunks), {len(questions)} "
        f"questions cycled, `PipelineConfig()`, in-process ASGI; variants alternate in blocks of {args.block}. "
        f"Machine: {machine()}. Command: `.venv/bin/python benchmarks/durable_write.py --n {args.n} "
        f"--concurrency {args.concurrency} --engines {args.engines}`.\n"
    )
    write_results(
        "durable_write",
        {
            "machine": machine(),
            "workload": {**info, "questions": len(questions), "block": args.block, "n": args.n},
            "wall_seconds": round(time.perf_counter() - t_start, 1),
            "rows": rows,
        },
        "\n".join(md),
    )


if __name__ == "__main__":
    main()
