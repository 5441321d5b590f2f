"""What the nodes run with: config, retriever, scorers, optional chat model and search.

Nodes are plain async functions `(state, runtime) -> NodeResult`; the graph builder binds the
runtime and turns each result into a state update plus one trace record, so no node can forget
to trace or to count its step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragloop.agent.details import NodeDetail
from ragloop.agent.search import SearchProvider, make_search_provider
from ragloop.config import PipelineConfig, Settings
from ragloop.models.chat import CallPurpose, CallSink, ChatModel, ChatRequest, ChatResponse, make_wrapped
from ragloop.models.scoring import Scorer, make_scorer
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.expansion import ExpansionLookup
from ragloop.retrieval.retriever import Retriever
from ragloop.retrieval.types import Hit
from ragloop.retrieval.variants import index_for


@dataclass
class NodeResult:
    update: dict[str, Any]
    decision: str
    detail: NodeDetail | dict[str, Any] = field(default_factory=dict)
    """The node's typed detail (`ragloop.agent.details`); a dict is checked key by key against it."""
    tokens: int = 0
    model_calls: int = 0
    cost: float = 0.0
    cached: bool = False


@dataclass
class Runtime:
    config: PipelineConfig
    retriever: Retriever
    grade_scorer: Scorer
    refine_scorer: Scorer
    support_scorer: Scorer
    chat: ChatModel | None = None
    answer_check: Scorer | None = None
    """Reads the drafted answer against the question (`agent.scorers.answer_check`); None: no check."""
    search: SearchProvider | None = None
    collection_name: str = ""

    @classmethod
    def build(
        cls,
        collection: Collection,
        config: PipelineConfig,
        *,
        chat: ChatModel | None = None,
        scorers: dict[str, Scorer] | None = None,
        search: SearchProvider | None = None,
        expansion: ExpansionLookup | None = None,
        calls: CallSink | None = None,
    ) -> Runtime:
        """Defaults from the config; tests pass doubles for any part. `expansion`: the semantic
        query-expansion lookup the retriever consults (the service passes the remediation cache).
        A chat model built from the config gets the production wrappers (cache, retries) and, with
        `calls` (the store's `model_calls`), the call log; a `chat` passed in is used as given."""
        settings: Settings = collection.settings
        agent = config.agent
        if chat is None and agent.chat_model:
            chat = make_wrapped(agent.chat_model, settings, sink=calls, purpose=CallPurpose.ANSWER)
        given = scorers or {}

        def scorer(role: str, name: str) -> Scorer:
            return given.get(role) or make_scorer(name, settings, chat_model=chat, calls=calls)

        if search is None and agent.external_search:
            search = make_search_provider(agent.external_search, settings, timeout_s=agent.external_timeout_s)
        return cls(
            config=config,
            retriever=Retriever(index_for(collection, config), config.retrieval, expansion=expansion),
            grade_scorer=scorer("grade", agent.scorers.grade),
            refine_scorer=scorer("refine", agent.scorers.refine),
            support_scorer=scorer("support", agent.scorers.support),
            chat=chat,
            answer_check=scorer("answer_check", agent.scorers.answer_check) if agent.scorers.answer_check else None,
            search=search,
            collection_name=collection.name,
        )

    async def retrieve(self, query: str, k: int | None = None) -> list[Hit]:
        return await asyncio.to_thread(self.retriever.retrieve, query, k)

    async def ask(self, req: ChatRequest) -> ChatResponse:
        if self.chat is None:
            raise RuntimeError("no chat model configured")
        return await self.chat.request(req)


def budget_exceeded(state: Mapping[str, Any], rt: Runtime) -> str | None:
    """The budget a turn has spent, if any (checked between nodes, and by `generate`, which
    turns extractive once a budget is spent)."""
    b = rt.config.agent.budgets
    if state.get("steps", 0) >= b.max_steps:
        return "budget_steps"
    if state.get("model_calls", 0) >= b.max_model_calls and rt.chat is not None:
        return "budget_model_calls"
    if time.time() - state.get("started_at", time.time()) > b.max_seconds:
        return "budget_time"
    return None
