"""`ragloop demo`: build a knowledge base from the Python standard library's own documentation, then
show the product: answers through the real answer graph with their cited sources, a follow-up in the
same conversation, and a refusal that says what was searched; then how to open the chat page.

Progress (extract, ingest, embedding) is a rich bar in a terminal and a few plain lines otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import typer
from rich.rule import Rule

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

# Questions the extracted docs answer (statistics.median, secrets, subprocess.getoutput/run with its
# TimeoutExpired), one follow-up read with the turn before it, and one the corpus cannot answer.
QUESTIONS: tuple[tuple[str, str, bool], ...] = (
    ("question", "How do I compute the median of a list of numbers?", False),
    ("question", "How can I generate a secure random token?", False),
    ("question", "How can I run a shell command and capture its output?", True),
    ("follow-up in the same conversation", "What if the command takes too long?", True),
    ("not in the documents", "Who won the 2018 FIFA World Cup?", False),
)


def register(app: typer.Typer) -> None:
    app.command()(demo)


@dataclass
class _Lines:
    """Plain progress lines for a pipe or a log: each phase at its start, every quarter, and its end."""

    started: float
    last: dict[str, int]

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not total:
            return
        quarter = 4 * done // total
        if self.last.get(phase, -1) >= quarter:
            return
        self.last[phase] = quarter
        console.print(f"  {phase}: {done}/{total} ({time.perf_counter() - self.started:.0f} s)", highlight=False)


@contextmanager
def _progress(show: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    from ragloop.cli.common import progress_bar

    if not show:
        yield None
    elif console.is_terminal:
        with progress_bar(True) as bar:
            yield bar
    else:
        yield _Lines(time.perf_counter(), {})


def _elapsed(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def demo(
    collection: CollectionOpt = "demo",
    config: ConfigOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Build a knowledge base from the Python standard library's docs and answer questions from it."""
    from ragloop.agent.api import new_thread_id
    from ragloop.cli.agent import _agent, _show
    from ragloop.ingest.pydoc_corpus import write_corpus
    from ragloop.retrieval.collection import Collection, CollectionError

    t0 = time.perf_counter()
    s = settings()
    cfg = pipeline_config(config)
    corpus = s.home / "demo-corpus"
    files = write_corpus(corpus)
    coll = Collection(collection, s)
    if not json_:
        console.print(
            f"extracted the documentation of {len(files)} standard-library modules to {corpus}", soft_wrap=True
        )
        again = coll.exists() and coll.generation() > 0
        how = "again: only what changed is embedded" if again else "the first run embeds every chunk"
        console.print(f"ingesting into the collection {collection!r} ({how})…", soft_wrap=True)
    try:
        with _progress(not json_) as prog:
            summary = coll.ingest([corpus], cfg, prog)
    except CollectionError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted: nothing was committed, the previous index is intact", code=130)
    finally:
        coll.close()
    t_ingest = time.perf_counter() - t0
    if not json_:
        for path, reason in summary.skipped:
            console.print(f"skipped {path}: {reason}", highlight=False, soft_wrap=True)
        console.print(
            f"collection {collection!r} generation {summary.generation}: {summary.chunks_total} chunks from "
            f"{summary.new + summary.changed + summary.unchanged} files ({summary.new} new, {summary.changed} changed; "
            f"{summary.chunks_embedded} chunks embedded) in {summary.seconds:.1f} s",
            highlight=False,
            soft_wrap=True,
        )
        model = cfg.agent.chat_model or "none, the offline default (extractive answers, every citation checked)"
        console.print(f"answering through the answer graph; chat model: {model}", highlight=False, soft_wrap=True)

    agent = _agent(collection, cfg)
    thread = new_thread_id()
    answers: list[dict[str, Any]] = []
    for i, (label, question, in_thread) in enumerate(QUESTIONS, 1):
        ans = agent.answer(question, thread_id=thread if in_thread else None)
        answers.append({"label": label, **ans.to_json()})
        if json_:
            continue
        out.print(Rule(f"{i}. {label}: {question}", align="left", style="dim"))
        if in_thread and ans.standalone_question.strip() != question.strip():
            out.print(f"read with the turn before it as: {ans.standalone_question}", highlight=False)
        _show(ans, trace=False)
    total = time.perf_counter() - t0
    serve = {
        "key": "ragloop keys create --role admin",
        "serve": f"ragloop serve --collection {collection}",
        "url": "http://127.0.0.1:8000/",
        "chat": f"ragloop chat --collection {collection}",
    }
    if json_:
        print_json(
            {
                "ingest": summary.to_json(),
                "answers": answers,
                "thread_id": thread,
                "next": serve,
                "seconds": {"ingest": round(t_ingest, 1), "total": round(total, 1)},
            }
        )
        return
    out.print(Rule("next", align="left", style="dim"))
    out.print(
        "Chat with these documents in a browser, with the trace and feedback of every answer:\n"
        f"  .venv/bin/{serve['key']}   # prints a key; an admin key may also upload\n"
        f"  .venv/bin/{serve['serve']}\n"
        f"  then open {serve['url']} and paste the key\n"
        f"Or in this terminal: .venv/bin/{serve['chat']}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"demo finished in {_elapsed(total)} (ingest {_elapsed(t_ingest)}, "
        f"{len(QUESTIONS)} answers {_elapsed(total - t_ingest)})",
        highlight=False,
        soft_wrap=True,
    )
