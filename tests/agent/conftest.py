"""Shared fixtures for the answer-graph tests: a tiny real collection (hashed embedder), agents
built from scripted parts (scorers, chat model, search provider), and helpers to read traces.

Everything here is deterministic and offline: `FunctionScorer`/`FixedScorer` stand in for the
scorers, a `FunctionModel` routed by prompt kind stands in for the chat model.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ragloop.agent.api import Agent, Answer
from ragloop.agent.runtime import Runtime
from ragloop.agent.search import SearchProvider, SearchResult, web_chunk_id
from ragloop.agent.types import TraceRecord
from ragloop.config import PipelineConfig, Settings
from ragloop.models.chat import ChatModel, ChatRequest
from ragloop.models.chat.testing import FunctionModel
from ragloop.models.scoring import FixedScorer, FunctionScorer, Scorer
from ragloop.retrieval.collection import Collection

# The scenarios below are written for these agent knobs (the keyword scorers' scale), so they are
# pinned here rather than following the shipped defaults, which are tuned for the real scorers.
# Entity grounding is off: several scenarios ask about names the corpus lacks on purpose, to drive
# the critique loop; test_grade_entities.py covers the gate itself.
HASHED = PipelineConfig().with_overrides(
    retrieval={"dense": {"embedder": "test:hashed"}},
    agent={
        "tau_lower": 0.3,
        "refine_threshold": 0.35,
        "refine_min_keep": 0,
        "answer_floor": 0.6,
        "entity_grounding": False,
    },
)

# doc id (path relative to the ingested root) -> Markdown
DOCS: dict[str, str] = {
    "bridge.md": (
        "# Zorblat Bridge\n\nThe Zorblat Bridge was completed in 1887 by the engineer Marta Quill. "
        "It spans the river Vell with a main span of 420 metres."
    ),
    "tower.md": (
        "# Quill Tower\n\nThe Quill Tower stands 96 metres tall in the town of Ostria. "
        "Marta Quill designed the tower after finishing the bridge."
    ),
    "ferry.md": (
        "# Vell ferry\n\nBefore the bridge opened, a ferry carried passengers across the Vell. "
        "The ferry service ended in 1890 after three years of competition."
    ),
    "guide/trams.md": (
        "# Ostria trams\n\nThe Ostria tram network opened in 1901 with four lines. "
        "Trams cross the Vell on the Zorblat Bridge every ten minutes."
    ),
}
WEB_DOCS: dict[str, str] = {
    "news/paint.md": "# Repainting\n\nThe Zorblat Bridge was repainted green in 1999 by the Ostria council.",
    "news/lights.md": "# Lights\n\nNew lamps were fitted to the Zorblat Bridge in 2004 for the festival.",
}


def cfg(**agent: Any) -> PipelineConfig:
    """The hashed-embedder pipeline with agent knobs replaced (`budgets={...}` nests)."""
    return HASHED.with_overrides(agent=agent) if agent else HASHED


def make_collection(name: str, docs: dict[str, str], root: Path) -> Collection:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in docs.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    coll = Collection(name, Settings())
    coll.ingest([root], HASHED)
    return coll


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = make_collection("kb", DOCS, tmp_path / "docs")
    yield c
    c.close()


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Collection]:
    c = make_collection("web", WEB_DOCS, tmp_path / "web")
    yield c
    c.close()


def chunk_texts(coll: Collection) -> dict[str, str]:
    return {c.chunk_id: c.text for c in coll.load().chunks}


def chunk_docs(coll: Collection) -> dict[str, str]:
    return {c.chunk_id: c.doc_id for c in coll.load().chunks}


# --- scorers --------------------------------------------------------------------------------------


def keyword_scorer(words: tuple[str, ...] | str, hi: float = 0.9, lo: float = 0.1) -> FunctionScorer:
    """`hi` when the passage (or the claim's context) contains any of `words`, else `lo`."""
    ws = (words,) if isinstance(words, str) else words

    def fn(_query: str, passage: str) -> float:
        return hi if any(w.lower() in passage.lower() for w in ws) else lo

    return FunctionScorer(fn, name=f"test:keywords-{'/'.join(ws)}")


def fixed(p: float) -> FixedScorer:
    return FixedScorer(p)


# --- a chat model routed by prompt kind -------------------------------------------------------------

SOURCE = re.compile(r'<source id="(\d+)" doc="([^"]*)">(.*?)</source>', re.DOTALL)
KINDS = (
    ("generate", "You answer questions using ONLY"),
    ("critique", "You audit an answer"),
    ("summary", "Update the running summary"),
    ("condense", "Rewrite the last question"),
    ("rewrite", "Rewrite the search query"),
)
Handler = Callable[[str, int], str]


def kind_of(req: ChatRequest) -> str:
    text = req.prompt_text()
    for kind, marker in KINDS:
        if marker in text:
            return kind
    return "other"


def sources_in(prompt: str) -> dict[int, str]:
    return {int(n): body for n, _doc, body in SOURCE.findall(prompt)}


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s+", text.strip())[0].rstrip(".!?")


def faithful_answer(prompt: str, _n: int) -> str:
    """What a well-behaved model writes: the first sentence of source 1, cited."""
    srcs = sources_in(prompt)
    if not srcs:
        return "I don't know based on the provided documents."
    return f"{first_sentence(srcs[min(srcs)])} [{min(srcs)}]."


def no_deficiencies(_prompt: str, _n: int) -> str:
    return '{"deficiencies": [], "overall_score": 1.0}'


class RoutedChat:
    """A `FunctionModel` whose reply depends on the kind of prompt (generate, critique, summary,
    condense, rewrite); records every prompt by kind. A handler gets (prompt, call index of that
    kind) and returns the reply text or raises (a `ModelError` to simulate a failing model)."""

    def __init__(self, **handlers: Handler) -> None:
        self.handlers: dict[str, Handler] = {
            "generate": faithful_answer,
            "critique": no_deficiencies,
            "summary": lambda _p, n: f"summary {n}",
            "condense": lambda p, _n: p.rsplit("Last question:", 1)[-1].strip(),
            "rewrite": lambda _p, n: f'{{"query": "zorblat bridge history {n}"}}',
        }
        self.handlers.update(handlers)
        self.prompts: dict[str, list[str]] = defaultdict(list)
        self.model: ChatModel = FunctionModel(self._reply)

    def _reply(self, req: ChatRequest) -> str:
        kind = kind_of(req)
        text = req.prompt_text()
        if "Your reply was not valid JSON" in text:  # a structured-output repair turn
            kind = f"{kind}-repair"
        self.prompts[kind].append(text)
        handler = self.handlers.get(kind) or self.handlers.get(kind.removesuffix("-repair"))
        if handler is None:
            return "ok"
        return handler(text, len(self.prompts[kind]) - 1)


# --- external search doubles ------------------------------------------------------------------------


class ListProvider(SearchProvider):
    """Returns fixed results and records the queries it was sent."""

    def __init__(self, results: list[tuple[str, str]], name: str = "list") -> None:
        self.name = name
        self.results = results  # (url, snippet)
        self.queries: list[str] = []

    async def search(self, query: str, k: int = 5) -> list[SearchResult]:
        self.queries.append(query)
        return [
            SearchResult(
                title=url.rsplit("/", 1)[-1],
                url=url,
                snippet=snippet,
                source=self.name,
                score=0.5,
                doc_id=url,
                chunk_id=web_chunk_id(url, snippet),
            )
            for url, snippet in self.results[:k]
        ]


class SlowProvider(SearchProvider):
    """Never answers in time: a `GuardedProvider` around it times out."""

    name = "slow"

    def __init__(self, delay_s: float = 5.0) -> None:
        self.delay_s = delay_s
        self.queries: list[str] = []

    async def search(self, query: str, k: int = 5) -> list[SearchResult]:
        self.queries.append(query)
        await asyncio.sleep(self.delay_s)
        return []


# --- agents -----------------------------------------------------------------------------------------


def build_agent(
    coll: Collection,
    config: PipelineConfig | None = None,
    *,
    chat: ChatModel | RoutedChat | None = None,
    grade: Scorer | None = None,
    refine: Scorer | None = None,
    support: Scorer | None = None,
    search: SearchProvider | None = None,
    agent_cls: type[Agent] = Agent,
) -> Agent:
    config = config or cfg()
    model = chat.model if isinstance(chat, RoutedChat) else chat
    rt = Runtime.build(
        coll,
        config,
        chat=model,
        scorers={
            "grade": grade or fixed(0.9),
            "refine": refine or fixed(0.9),
            "support": support or fixed(0.9),
        },
        search=search,
    )
    return agent_cls(coll, config, runtime=rt)


def ask(agent: Agent, question: str, thread_id: str | None = None) -> Answer:
    return agent.answer(question, thread_id=thread_id)


def records(ans: Answer, node: str) -> list[TraceRecord]:
    return [r for r in ans.trace.records if r.node == node]


def cited_numbers(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\[(\d+)\]", text)}
