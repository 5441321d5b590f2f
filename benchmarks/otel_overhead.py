"""What OpenTelemetry tracing costs a question: the answer graph off vs on (in-memory exporter).

One small collection (hashed embedder, lexical scorers, the scripted test chat model behind the call
log: every node and model call of a real turn, no model time) answers the same questions in rounds
that alternate the modes, so drift on a shared machine hits every mode alike:

- `off`: no exporter configured (the default): `ragloop.tracing.span` yields None;
- `on`: spans recorded into the SDK's in-memory exporter through a simple (synchronous) processor,
  the worst case for the request path (OTLP uses a batch processor that exports off-thread);
- `on+content`: the same with question, answer and prompt text in the spans.

Reported: median wall and CPU milliseconds per answer and the ratio to `off`, spans per answer, and
the cost of one empty `span()` block off and on (nanoseconds).

    .venv/bin/python benchmarks/otel_overhead.py            # 8 rounds x 25 questions per mode
    .venv/bin/python benchmarks/otel_overhead.py --quick    # 3 rounds x 10

Results: `benchmarks/results/otel_overhead.json` and `.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import machine, print_table, write_results
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragloop import tracing
from ragloop.agent.api import Agent
from ragloop.agent.runtime import Runtime
from ragloop.config import PipelineConfig, Settings
from ragloop.models.chat import MemorySink
from ragloop.retrieval.collection import Collection

DOCS = {
    "bridge.md": "# Zorblat Bridge\n\nThe Zorblat Bridge over the Vell was completed in 1887. 412 metres long.",
    "tower.md": "# Quarn Tower\n\nThe Quarn Tower was built in 1902 and is 96 metres tall; its clock dates from 1921.",
    "ferry.md": "# Ferry\n\nThe Vell ferry ran from 1850 until the Zorblat Bridge opened; it carried 40 passengers.",
    "trams.md": "# Trams\n\nTrams cross the Vell on the Zorblat Bridge every ten minutes since 1910.",
}
QUESTIONS = [
    "When was the Zorblat Bridge completed?",
    "How tall is the Quarn Tower?",
    "How many passengers did the Vell ferry carry?",
    "How often do trams cross the Vell?",
    "When does the clock of the Quarn Tower date from?",
]
CONFIG = PipelineConfig().with_overrides(
    retrieval={"dense": {"embedder": "test:hashed"}},
    agent={
        "chat_model": "test:scripted",
        "scorers": {"grade": "lexical", "refine": "lexical", "support": "lexical"},
        "tau_lower": 0.3,
        "entity_grounding": False,
    },
)
MODES = ("off", "on", "on+content")


def build_agent(home: Path) -> Agent:
    root = home / "docs"
    root.mkdir(parents=True)
    for name, text in DOCS.items():
        (root / name).write_text(text)
    coll = Collection("bench", Settings(home=home))
    coll.ingest([root], CONFIG)
    return Agent(coll, CONFIG, runtime=Runtime.build(coll, CONFIG, calls=MemorySink()))


async def one_round(agent: Agent, n: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for i in range(n):
        t, c = time.perf_counter(), time.process_time()
        await agent.aanswer(QUESTIONS[i % len(QUESTIONS)])
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def span_ns(reps: int) -> float:
    """CPU nanoseconds per empty `with tracing.span(...)` block under the current setting (best of 3)."""
    attrs: tracing.Attributes = {"a": 1}
    best = float("inf")
    for _ in range(3):
        t = time.process_time_ns()
        for _ in range(reps):
            with tracing.span("x", attrs):
                pass
        best = min(best, (time.process_time_ns() - t) / reps)
    return best


def in_mode(mode: str, exporter: InMemorySpanExporter, provider: TracerProvider, fn: Callable[[], Any]) -> Any:
    if mode == "off":
        return fn()
    with tracing.use_provider(provider, content=mode == "on+content"):
        return fn()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--questions", type=int, default=25, help="Questions per mode per round.")
    ap.add_argument("--quick", action="store_true", help="3 rounds x 10 questions.")
    args = ap.parse_args()
    rounds, n = (3, 10) if args.quick else (args.rounds, args.questions)

    tracing.reset()
    assert not tracing.configure({}), "tracing must start off"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tempfile.TemporaryDirectory() as tmp:
        agent = build_agent(Path(tmp))
        asyncio.run(one_round(agent, len(QUESTIONS)))  # warm up: imports, caches, compiled graph
        wall: dict[str, list[float]] = {m: [] for m in MODES}
        cpu: dict[str, list[float]] = {m: [] for m in MODES}
        spans: dict[str, int] = dict.fromkeys(MODES, 0)
        for r in range(rounds):
            for mode in MODES[r % 3 :] + MODES[: r % 3]:  # rotate the order between rounds
                exporter.clear()
                w, c = in_mode(mode, exporter, provider, lambda: asyncio.run(one_round(agent, n)))
                wall[mode] += w
                cpu[mode] += c
                spans[mode] += len(exporter.get_finished_spans())
        micro = {mode: in_mode(mode, exporter, provider, lambda: span_ns(20_000)) for mode in ("off", "on")}
    provider.shutdown()

    base_wall, base_cpu = statistics.median(wall["off"]), statistics.median(cpu["off"])
    rows, out = [], {}
    for mode in MODES:
        mw, mc = statistics.median(wall[mode]), statistics.median(cpu[mode])
        per = spans[mode] / (rounds * n)
        out[mode] = {
            "answers": len(wall[mode]),
            "wall_ms_median": round(mw * 1000, 3),
            "cpu_ms_median": round(mc * 1000, 3),
            "wall_ratio": round(mw / base_wall, 3),
            "cpu_ratio": round(mc / base_cpu, 3),
            "spans_per_answer": round(per, 1),
        }
        rows.append([mode, len(wall[mode]), mw * 1000, mc * 1000, mw / base_wall, mc / base_cpu, per])
    md = "## OpenTelemetry overhead per answer (in-memory exporter, simple processor)\n\n"
    md += print_table(
        "Per answer, median",
        ["mode", "answers", "wall ms", "cpu ms", "wall ratio", "cpu ratio", "spans/answer"],
        rows,
    )
    md += print_table("One empty span() block (CPU, best of 3)", ["mode", "ns"], [[m, v] for m, v in micro.items()], 0)
    write_results(
        "otel_overhead",
        {
            "command": "python benchmarks/otel_overhead.py" + (" --quick" if args.quick else ""),
            "rounds": rounds,
            "questions_per_round": n,
            "modes": out,
            "span_block_ns": {m: round(v) for m, v in micro.items()},
            "machine": machine(),
        },
        md,
    )


if __name__ == "__main__":
    main()
