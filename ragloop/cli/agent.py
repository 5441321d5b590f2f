"""`ragloop ask` and `ragloop chat`: the answer graph from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.panel import Panel
from rich.table import Table

from ragloop.cli.common import (
    CollectionOpt,
    ConfigOpt,
    JsonOpt,
    console,
    fail,
    out,
    pipeline_config,
    print_json,
    settings,
)
from ragloop.config import PipelineConfig

if TYPE_CHECKING:
    from ragloop.agent.api import Agent, Answer


def register(app: typer.Typer) -> None:
    app.command()(ask)
    app.command()(chat)


def _agent(collection: str, cfg: PipelineConfig) -> Agent:
    from ragloop.agent.build import build_agent
    from ragloop.models.errors import ModelError
    from ragloop.retrieval.collection import Collection, CollectionError, list_collections
    from ragloop.store.call_log import StoreCallLog

    s = settings()
    coll = Collection(collection, s)
    if not coll.exists():
        fail(f"no collection named {collection!r}; known: {', '.join(list_collections(s)) or 'none'}")
    try:
        return build_agent(coll, cfg, calls=StoreCallLog())
    except (CollectionError, ModelError, ValueError) as exc:
        fail(str(exc))


def _serving_config(config: Path | None) -> PipelineConfig:
    """`--config` when given; else the store's active version (what `/v1/query` serves), else the defaults."""
    if config is not None:
        return pipeline_config(config)
    from ragloop.store import Store

    try:
        with Store.open() as store:
            row = store.pipelines.current()
            if row is not None:
                return PipelineConfig.model_validate(row.config)
    except Exception as exc:  # no store yet, or an unreadable one: the defaults still answer
        console.print(f"[yellow]no stored pipeline version ({type(exc).__name__}); using the defaults[/]")
    return PipelineConfig()


def _show(ans: Answer, trace: bool) -> None:
    style = "yellow" if ans.refused else "green"
    title = f"{'refused' if ans.refused else 'answer'} · {ans.termination_reason} · quality {ans.quality_score:.2f}"
    out.print(Panel(ans.answer, title=title, border_style=style, title_align="left"))
    if ans.citations:
        table = Table(show_header=True, title_justify="left")
        for col in ("#", "source", "score", "excerpt"):
            table.add_column(col)
        for c in ans.citations:
            table.add_row(str(c.n), c.doc_id, f"{c.score:.2f}", c.excerpt[:160])
        out.print(table)
    if trace:
        t = Table(title="trace", title_justify="left")
        for col in ("node", "decision", "ms"):
            t.add_column(col)
        for r in ans.trace.records:
            t.add_row(r.node, r.decision, f"{r.latency_ms:.0f}")
        out.print(t)
    s = ans.trace.summarize()
    console.print(
        f"{s.steps} steps, {s.rewrites} rewrites, {s.critique_cycles} critique cycles, {ans.latency_ms:.0f} ms",
        highlight=False,
    )


def _answer(agent: Agent, question: str, thread_id: str | None) -> tuple[Answer, str]:
    """The answer, and the run id its model calls are logged under (`ragloop models calls --run ID`)."""
    from ragloop.models.chat import CallPurpose, call_scope
    from ragloop.store import new_id

    run_id = new_id()
    with call_scope(run_id=run_id, purpose=CallPurpose.ANSWER):
        return agent.answer(question, thread_id=thread_id), run_id


def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    collection: CollectionOpt = "default",
    config: ConfigOpt = None,
    thread: Annotated[str | None, typer.Option("--thread", help="Conversation id (keeps memory).")] = None,
    trace: Annotated[bool, typer.Option("--trace", help="Show (or include) every node's decision.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Answer one question from a collection, checking the answer before showing it."""
    if not question.strip():
        fail("the question is empty")
    agent = _agent(collection, _serving_config(config))
    ans, run_id = _answer(agent, question, thread)
    if json_:
        print_json(ans.to_json(with_trace=trace) | {"run_id": run_id})
    else:
        _show(ans, trace)


def chat(
    collection: CollectionOpt = "default",
    config: ConfigOpt = None,
    thread: Annotated[str | None, typer.Option("--thread", help="Resume a conversation.")] = None,
    trace: Annotated[bool, typer.Option("--trace")] = False,
) -> None:
    """A multi-turn conversation; follow-ups are condensed with the earlier turns. Empty line or /quit ends it."""
    from ragloop.agent.api import new_thread_id

    agent = _agent(collection, _serving_config(config))
    thread_id = thread or new_thread_id()
    console.print(f"thread {thread_id} (resume with --thread {thread_id})", highlight=False)
    while True:
        try:
            q = input("you> ").strip()
        except EOFError:
            break
        if not q or q in ("/quit", "/exit"):
            break
        _show(_answer(agent, q, thread_id)[0], trace)
