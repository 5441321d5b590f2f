"""Conversation memory: follow-ups condensed offline, the rolling summary and trimmed checkpoint
beside the full conversation log, what the summariser is (not) shown, forgetting a thread, and
the checkpointers (SQLite under RAGLOOP_HOME; PostgreSQL against the real server)."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener

from ragloop.agent.api import Agent
from ragloop.agent.memory import open_checkpointer
from ragloop.agent.types import TraceRecord
from ragloop.retrieval.collection import Collection
from ragloop.text.analysis import content_terms, entities
from tests.agent.conftest import RoutedChat, ask, build_agent, keyword_scorer, records

Q1 = "When was the Zorblat Bridge completed?"
TURNS = [
    Q1,
    "Who designed the Quill Tower?",
    "When did the Vell ferry service end?",
    "How tall is the Quill Tower?",
    "When did the Ostria tram network open?",
]
PG_URL = os.environ.get("RAGLOOP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def checkpoint(agent: Agent, thread_id: str) -> dict[str, Any] | None:
    """The thread's latest checkpointed state, or None when the thread has none."""

    async def go() -> dict[str, Any] | None:
        async with open_checkpointer(agent.checkpointer_url) as saver:
            cfg = {"configurable": {"thread_id": thread_id}}
            if await saver.aget_tuple(cfg) is None:
                return None
            graph = agent._graph.compile(checkpointer=saver)
            return dict((await graph.aget_state(cfg)).values)

    return asyncio.run(go())


def texts(messages: list[Any]) -> list[str]:
    return [m.content for m in messages]


# --- condensation ------------------------------------------------------------------------------------


def test_follow_up_is_condensed_offline_with_the_earlier_turns_entities(coll: Collection) -> None:
    grade = keyword_scorer("Zorblat")
    agent = build_agent(coll, grade=grade)
    first = ask(agent, Q1, thread_id="t-follow")
    assert first.standalone_question == Q1

    follow = "Who designed it?"
    ans = ask(agent, follow, thread_id="t-follow")
    carried = {e for e in entities(Q1) if not content_terms(e) <= content_terms(follow)}
    assert carried  # sanity: the first question names something the follow-up does not
    assert ans.standalone_question != follow and ans.standalone_question.startswith(follow)
    for e in carried:
        assert e in ans.standalone_question
    assert records(ans, "condense")[0].decision == "offline carry-forward"
    # the standalone question is what was retrieved and graded
    assert records(ans, "retrieve")[0].detail.queries == [ans.standalone_question]
    assert {q for kind, q, _ in grade.calls if kind == "relevance"} >= {ans.standalone_question}
    assert "Marta Quill" in ans.answer and not ans.refused


def test_a_standalone_second_question_is_left_alone(coll: Collection) -> None:
    agent = build_agent(coll)
    ask(agent, Q1, thread_id="t-alone")
    q = "How tall is the Quill Tower in Ostria?"
    ans = ask(agent, q, thread_id="t-alone")
    assert ans.standalone_question == q
    assert records(ans, "condense")[0].decision == "standalone already"


# --- rolling summary and trimming -------------------------------------------------------------------


def test_rolling_summary_trims_the_checkpoint_and_the_log_keeps_everything(coll: Collection) -> None:
    agent = build_agent(coll)
    cfg = agent.runtime.config.agent
    thread = "t-summary"
    answers = []
    for i, q in enumerate(TURNS[: cfg.summarize_after]):
        ans = ask(agent, q, thread_id=thread)
        answers.append(ans)
        summarised = records(ans, "condense")[0].detail.summarised
        assert summarised == (i + 1 >= cfg.summarize_after)
    before, last = answers[-2], answers[-1]
    assert not before.graph_state.get("summary")
    # the summary holds the first exchange, which left the working memory
    summary = last.graph_state["summary"]
    assert f"Q: {TURNS[0]}" in summary and answers[0].answer.split("\n")[0][:100] in summary
    assert TURNS[cfg.summarize_after - 1] not in summary  # the current question is not summarised

    full = agent.log.messages(thread)
    conversation = [m for a in answers for m in (a.question, a.answer)]
    assert [m["content"] for m in full] == conversation  # uncut
    assert [m["role"] for m in full] == ["user", "assistant"] * cfg.summarize_after
    saved = checkpoint(agent, thread)
    assert saved is not None
    kept = 2 * cfg.keep_exchanges + 2  # the last exchanges plus the current one
    assert texts(saved["messages"]) == conversation[-kept:]
    assert isinstance(saved["messages"][0], HumanMessage) and isinstance(saved["messages"][-1], AIMessage)
    assert saved["summary"] == summary

    # the next turn folds one more exchange in and keeps the earlier summary's content
    nxt = ask(agent, TURNS[cfg.summarize_after], thread_id=thread)
    assert nxt.graph_state["summary"].startswith(summary)
    assert f"Q: {TURNS[1]}" in nxt.graph_state["summary"]
    assert texts(checkpoint(agent, thread)["messages"]) == [*conversation, nxt.question, nxt.answer][-kept:]  # type: ignore[index]
    assert len(agent.log.messages(thread)) == 2 * (cfg.summarize_after + 1)


def test_the_summariser_never_sees_the_current_question(coll: Collection) -> None:
    chat = RoutedChat()
    agent = build_agent(coll, chat=chat, grade=keyword_scorer(("Zorblat", "Quill", "Vell", "Ostria")))
    cfg = agent.runtime.config.agent
    thread = "t-llm-summary"
    answers = [ask(agent, q, thread_id=thread) for q in TURNS[: cfg.summarize_after]]
    prompts = chat.prompts["summary"]
    assert len(prompts) == 1
    current = TURNS[cfg.summarize_after - 1]
    assert current not in prompts[0]
    assert TURNS[0] in prompts[0] and first_line(answers[0].answer) in prompts[0]
    for kept in TURNS[1 : cfg.summarize_after - 1]:  # the recent exchanges stay as messages
        assert kept not in prompts[0]
    assert answers[-1].graph_state["summary"] == "summary 0"
    # the condenser, unlike the summariser, does get the current question
    assert current in chat.prompts["condense"][-1]

    nxt = ask(agent, TURNS[cfg.summarize_after], thread_id=thread)
    assert len(chat.prompts["summary"]) == 2
    second = chat.prompts["summary"][1]
    assert "summary 0" in second  # the earlier summary is carried forward
    assert TURNS[1] in second and TURNS[cfg.summarize_after] not in second
    assert nxt.graph_state["summary"] == "summary 1"


def first_line(text: str) -> str:
    return text.split("\n")[0][:80]


# --- forgetting ---------------------------------------------------------------------------------------


def test_forget_removes_checkpoints_and_the_log(coll: Collection) -> None:
    agent = build_agent(coll)
    thread, other = "t-forget", "t-keep"
    ask(agent, Q1, thread_id=thread)
    ask(agent, "Who designed it?", thread_id=thread)
    ask(agent, Q1, thread_id=other)
    assert checkpoint(agent, thread) is not None and len(agent.log.messages(thread)) == 4

    asyncio.run(agent.forget(thread))
    assert checkpoint(agent, thread) is None
    assert agent.log.messages(thread) == [] and thread not in agent.log.threads()
    # other threads are untouched
    assert checkpoint(agent, other) is not None and len(agent.log.messages(other)) == 2
    # the same id starts a fresh conversation: nothing is carried forward
    again = ask(agent, "Who designed it?", thread_id=thread)
    assert again.standalone_question == "Who designed it?"
    assert len(again.graph_state["messages"]) == 2


# --- checkpoints ---------------------------------------------------------------------------------------


def test_checkpoints_round_trip_the_state_types_without_allowlist_warnings(coll: Collection) -> None:
    events: list[dict[str, Any]] = []
    unregister = register_serde_event_listener(lambda ev: events.append(dict(ev)))
    try:
        agent = build_agent(coll)
        ask(agent, Q1, thread_id="t-serde")
        ask(agent, "Who designed it?", thread_id="t-serde")
        saved = checkpoint(agent, "t-serde")
    finally:
        unregister()
    assert saved is not None
    assert saved["trace"] and all(isinstance(r, TraceRecord) for r in saved["trace"])
    assert saved["citations"] and type(saved["citations"][0]).__name__ == "Citation"
    assert [e for e in events if e.get("module", "").startswith("ragloop")] == []


def _postgres_available() -> None:
    """Skip with the reason when the server or the `postgres` extra is missing; under CI=true fail."""
    ci = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")

    def unavailable(why: str) -> None:
        if ci:
            pytest.fail(f"PostgreSQL checkpointer test cannot run under CI: {why}", pytrace=False)
        pytest.skip(why)

    try:
        import psycopg
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver  # noqa: F401
    except ImportError as exc:
        unavailable(f"the postgres extra is not installed ({exc}): pip install -e '.[postgres]'")
        return
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("select 1")
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {PG_URL} is not reachable: {exc}".strip())


@pytest.mark.postgres
def test_postgres_checkpointer_keeps_and_forgets_a_thread(coll: Collection) -> None:
    _postgres_available()
    rt_agent = build_agent(coll)
    agent = Agent(coll, rt_agent.config, runtime=rt_agent.runtime, checkpointer_url=PG_URL, log_url=PG_URL)
    thread = f"ragloop-test-{uuid.uuid4().hex}"
    try:
        first = ask(agent, Q1, thread_id=thread)
        ans = ask(agent, "Who designed it?", thread_id=thread)
        assert not first.refused and "Zorblat Bridge" in ans.standalone_question
        saved = checkpoint(agent, thread)
        assert saved is not None
        assert texts(saved["messages"]) == [Q1, first.answer, "Who designed it?", ans.answer]
        assert all(isinstance(r, TraceRecord) for r in saved["trace"])
        # the full conversation log is in PostgreSQL too, not in a file under RAGLOOP_HOME
        assert agent.log.engine.dialect.name == "postgresql"
        assert [m["content"] for m in agent.log.messages(thread)] == [Q1, first.answer, "Who designed it?", ans.answer]
        assert not (coll.settings.home / "conversations.sqlite").exists()
    finally:
        asyncio.run(agent.forget(thread))
    assert checkpoint(agent, thread) is None
    assert agent.log.messages(thread) == []
    agent.memory.close()


def test_a_seeded_conversation_is_condensed_like_one_the_agent_answered(coll: Collection) -> None:
    agent = build_agent(coll, grade=keyword_scorer("Zorblat"))
    asyncio.run(agent.aseed("t-seed", [("user", Q1), ("assistant", "It was completed in 1887 [1].")]))
    seeded = checkpoint(agent, "t-seed")
    assert seeded is not None and texts(seeded["messages"])[0] == Q1
    ans = ask(agent, "How long is it?", thread_id="t-seed")
    # the follow-up carries the earlier question's names, as it would after an answered turn
    assert ans.standalone_question == "How long is it? (Zorblat Bridge)"
    after = checkpoint(agent, "t-seed")
    assert after is not None and texts(after["messages"])[:2] == [Q1, "It was completed in 1887 [1]."]
    logged = [(m["role"], m["meta"].get("seeded", False)) for m in agent.log.messages("t-seed")]
    assert logged == [("user", True), ("assistant", True), ("user", False), ("assistant", False)]


def test_an_llm_condensation_that_answers_or_changes_the_question_is_not_used(coll: Collection) -> None:
    from ragloop.agent.nodes.condense import usable_rewrite

    assert usable_rewrite("How long is the Zorblat Bridge?", "How long is it?")
    assert not usable_rewrite("The Zorblat Bridge is 300 m long.", "How long is it?")  # an answer
    assert not usable_rewrite(
        "What are the best neighborhoods to buy a house?", "Savings accounts are not good investments."
    )
    replies = iter(["It was completed in 1887 by the engineer Ada Vell.", "How long is the Zorblat Bridge?"])
    chat = RoutedChat(condense=lambda _p, _n: next(replies))
    agent = build_agent(coll, chat=chat, grade=keyword_scorer("Zorblat"))
    ask(agent, Q1, thread_id="t-guard")
    rejected = ask(agent, "And who designed it?", thread_id="t-guard")
    how = records(rejected, "condense")[0].decision
    assert how.startswith("offline (llm rewrite rejected: 'It was completed") and how.endswith("offline carry-forward")
    assert rejected.standalone_question == "And who designed it? (Zorblat Bridge)"
    used = ask(agent, "How long is it?", thread_id="t-guard")
    assert (
        records(used, "condense")[0].decision == "llm" and used.standalone_question == "How long is the Zorblat Bridge?"
    )
