"""The agent's Python API: `answer(question, thread_id=None, config=None) -> Answer` and the
async `Agent.astream` that yields node events (for the service)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, cast

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphRecursionError

from ragloop.agent.answer import AgentEvent, Answer, AnswerEvent, NodeEvent, answer_from_state
from ragloop.agent.graph import build_graph
from ragloop.agent.memory import ConversationLog, ConversationMemory
from ragloop.agent.nodes.validate import CITE
from ragloop.agent.runtime import Runtime
from ragloop.agent.spans import answer_attributes, graph_input_attributes
from ragloop.agent.state import turn_input
from ragloop.config import PipelineConfig, Settings
from ragloop.retrieval.collection import Collection
from ragloop.tracing import set_attributes, span


class Agent:
    """One collection + one pipeline version. Safe to reuse across questions and threads.

    Conversation memory (checkpoints and the full message log) is SQLite under RAGLOOP_HOME unless
    `checkpointer_url` / `log_url` name other databases (PostgreSQL included), or `memory` is one
    shared with other agents (the service's, which follows its database). The agent never opens
    or closes a shared `memory`; its owner does.
    """

    def __init__(
        self,
        collection: Collection,
        config: PipelineConfig | None = None,
        runtime: Runtime | None = None,
        checkpointer_url: str | None = None,
        log_url: str | None = None,
        memory: ConversationMemory | None = None,
    ) -> None:
        if memory is not None and (checkpointer_url or log_url):
            raise ValueError("pass either `memory` or the memory URLs, not both")
        self.collection = collection
        # a given runtime brings its config: budgets, recursion limit and version must be the graph's
        self.config = config or (runtime.config if runtime is not None else PipelineConfig())
        self.runtime = runtime or Runtime.build(collection, self.config)
        settings: Settings = collection.settings
        settings.home.mkdir(parents=True, exist_ok=True)
        self.memory = memory or ConversationMemory(
            checkpointer_url or f"sqlite:///{settings.home / 'checkpoints.sqlite'}",
            log_url or f"sqlite:///{settings.home / 'conversations.sqlite'}",
        )
        # compiled once: compiling costs ~40 ms a turn; a turn with memory gets a copy bound to its saver
        self._graph = build_graph(self.runtime)
        self._compiled = self._graph.compile()
        self._log: ConversationLog | None = None
        """Overrides the memory's log when set (callers that keep an evaluation run's log apart)."""

    @property
    def checkpointer_url(self) -> str:
        return self.memory.checkpointer_url

    @property
    def log(self) -> ConversationLog:
        return self._log if self._log is not None else self.memory.log

    def _limits(self, thread_id: str | None) -> dict[str, Any]:
        cfg: dict[str, Any] = {"recursion_limit": self.runtime.config.agent.budgets.max_steps + 10}
        if thread_id:
            cfg["configurable"] = {"thread_id": thread_id}
        return cfg

    async def astream(self, question: str, thread_id: str | None = None) -> AsyncIterator[AgentEvent]:
        """A `NodeEvent` per step, then one `AnswerEvent`. The answer event is the only one with text
        a user should see: drafts are validated before they get there."""
        t0 = time.perf_counter()
        if not question.strip():
            raise ValueError("the question is empty")
        state: dict[str, Any] = {}
        inputs = turn_input(question, session_id=thread_id or "")
        # the turn's span: the node spans are its children (LangGraph runs nodes in tasks that copy the context)
        with span("ragloop.graph", graph_input_attributes(question, thread_id)) as sp:
            if thread_id:
                async with self.memory.checkpointer() as saver:
                    graph = self._compiled.copy({"checkpointer": saver})
                    async for ev in self._run(graph, inputs, thread_id, state):
                        yield ev
            else:
                async for ev in self._run(self._compiled, inputs, None, state):
                    yield ev
            ans = answer_from_state(state, question, thread_id, self.config.version_id, t0)
            if sp is not None:
                set_attributes(sp, answer_attributes(ans))
        if thread_id:
            await asyncio.to_thread(self._log_turn, thread_id, question, ans)
        yield AnswerEvent(answer=ans)

    def _log_turn(self, thread_id: str, question: str, ans: Answer) -> None:
        self.log.append(thread_id, "user", question)
        self.log.append(
            thread_id,
            "assistant",
            ans.answer,
            {
                "citations": [c.model_dump() for c in ans.citations],
                "refused": ans.refused,
                "termination_reason": ans.termination_reason,
            },
        )

    async def _run(
        self, graph: Any, inputs: dict[str, Any], thread_id: str | None, state: dict[str, Any]
    ) -> AsyncIterator[NodeEvent]:
        try:
            # durability "exit": the turn's state is checkpointed once, when it ends, not after every
            # step (~15 synchronous writes a turn); a turn that crashes leaves the previous state
            extra = {"durability": "exit"} if thread_id else {}
            stream = graph.astream(inputs, self._limits(thread_id), stream_mode=["values", "updates"], **extra)
            async for mode, chunk in stream:
                if mode == "values":
                    state.clear()
                    state.update(chunk)
                else:
                    for node, upd in chunk.items():
                        rec = (upd or {}).get("trace", [None])[-1] if isinstance(upd, dict) else None
                        if rec is not None:
                            yield NodeEvent(node=node, decision=rec.decision, latency_ms=rec.latency_ms)
        except GraphRecursionError:
            state["termination_reason"] = "recursion_limit"
            if state.get("validated_answer") and not state.get("final_answer"):
                answer = state["validated_answer"]
                used = {int(n) for n in CITE.findall(answer)}
                state["final_answer"] = answer
                state["citations"] = [c for c in state.get("validated_citations") or [] if c.n in used]
            elif not state.get("final_answer"):
                state["refused"] = True
                state["final_answer"] = "I couldn't finish checking an answer within the step limit."

    async def aanswer(self, question: str, thread_id: str | None = None) -> Answer:
        final: Answer | None = None
        async for ev in self.astream(question, thread_id):
            if isinstance(ev, AnswerEvent):
                final = ev.answer
        assert final is not None
        return final

    def answer(self, question: str, thread_id: str | None = None) -> Answer:
        from ragloop.models.chat import run_sync

        return run_sync(self.aanswer(question, thread_id))

    async def aseed(self, thread_id: str, turns: Sequence[tuple[Literal["user", "assistant"], str]]) -> None:
        """Start a thread from a given conversation (oldest first) without answering it: the next
        turn condenses against these messages exactly as against its own earlier turns. For
        evaluations that test one turn of a reference conversation (MTRAG), and for importing a
        conversation held elsewhere. Written as if `finalize` had just ended a turn, so the next
        question starts a fresh run of the graph."""
        if not turns:
            return
        msgs = [HumanMessage(content=t) if role == "user" else AIMessage(content=t) for role, t in turns]
        async with self.memory.checkpointer() as saver:
            graph = self._compiled.copy({"checkpointer": saver})
            await graph.aupdate_state(
                cast(RunnableConfig, self._limits(thread_id)), {"messages": msgs}, as_node="finalize"
            )
        await asyncio.to_thread(self._log_seed, thread_id, turns)

    def _log_seed(self, thread_id: str, turns: Sequence[tuple[str, str]]) -> None:
        for role, text in turns:
            self.log.append(thread_id, role, text, {"seeded": True})

    async def forget(self, thread_id: str) -> None:
        """Delete a conversation: its checkpoints and its full message log."""
        async with self.memory.checkpointer() as saver:
            await saver.adelete_thread(thread_id)
        await asyncio.to_thread(self.log.delete, thread_id)


def answer(
    question: str,
    thread_id: str | None = None,
    config: PipelineConfig | None = None,
    collection: str = "default",
    settings: Settings | None = None,
) -> Answer:
    """One question against a collection, with the offline default unless the config names a chat model."""
    coll = Collection(collection, settings or Settings.from_env())
    try:
        return Agent(coll, config).answer(question, thread_id)
    finally:
        coll.close()


def new_thread_id() -> str:
    return uuid.uuid4().hex
