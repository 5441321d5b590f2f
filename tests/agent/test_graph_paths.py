"""The answer graph's paths end to end on a tiny real collection: CRAG verdicts (CORRECT,
AMBIGUOUS with and without external search, INCORRECT), rewrites (duplicates included),
degraded external search, the ablation switches, and the trace every path leaves."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from ragloop.agent.answer import AnswerEvent, NodeEvent
from ragloop.agent.api import Agent
from ragloop.agent.search import CollectionProvider, GuardedProvider, SearchTimeout
from ragloop.agent.state import turn_input
from ragloop.agent.trace import Trace
from ragloop.agent.types import TraceRecord
from ragloop.config import Settings
from ragloop.models.scoring import FunctionScorer
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import (
    HASHED,
    ListProvider,
    RoutedChat,
    SlowProvider,
    ask,
    build_agent,
    cfg,
    chunk_docs,
    chunk_texts,
    cited_numbers,
    fixed,
    keyword_scorer,
    records,
)

Q_BRIDGE = "When was the Zorblat Bridge completed?"


class FailingProvider(ListProvider):
    def __init__(self) -> None:
        super().__init__([], name="failing")

    async def search(self, query: str, k: int = 5) -> Any:
        self.queries.append(query)
        raise SearchTimeout("failing: no answer within 3 s")


def searched_queries(ans: Any) -> list[str]:
    return [q for r in records(ans, "retrieve") for q in r.detail.queries]


# --- CORRECT ---------------------------------------------------------------------------------------


def test_correct_path_refines_generates_validates_critiques_and_cites_real_chunks(coll: Collection) -> None:
    refine = keyword_scorer("Zorblat")
    agent = build_agent(coll, grade=keyword_scorer("Zorblat"), refine=refine)
    ans = ask(agent, Q_BRIDGE)

    assert ans.trace.nodes() == [
        "condense",
        "retrieve",
        "grade",
        "refine",
        "generate",
        "validate_citations",
        "critique",
        "finalize",
    ]
    assert ans.verdict == "CORRECT" and not ans.refused
    assert ans.termination_reason == "converged"
    # citations point at real chunks, with the doc id of the file they came from
    texts, docs = chunk_texts(coll), chunk_docs(coll)
    assert ans.citations
    for c in ans.citations:
        assert c.chunk_id in texts and c.doc_id == docs[c.chunk_id]
        assert "Zorblat" in texts[c.chunk_id]
        assert c.excerpt and c.excerpt in texts[c.chunk_id]
    assert cited_numbers(ans.answer) == {c.n for c in ans.citations}
    # refinement kept only the strips the refine scorer passed: every answer sentence has the keyword
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", ans.answer) if s.strip()]
    assert sentences and all("Zorblat" in s for s in sentences)
    assert "1887" in ans.answer  # the fact the question asks for survived refinement
    dropped = [s for s in ("It spans the river Vell",) if s in texts[ans.citations[0].chunk_id]]
    assert dropped and not any(s in ans.answer for s in dropped)
    assert ans.quality_score > 0
    assert refine.batches == 1  # all strips scored in one batched call


# --- AMBIGUOUS -------------------------------------------------------------------------------------


def test_ambiguous_without_external_search_refines_the_internal_chunks(coll: Collection) -> None:
    agent = build_agent(coll, grade=fixed(0.5), refine=keyword_scorer("1887"))
    ans = ask(agent, Q_BRIDGE)
    assert records(ans, "grade")[0].decision == "AMBIGUOUS"
    assert "external_search" not in ans.trace.nodes()
    assert ans.trace.nodes()[:4] == ["condense", "retrieve", "grade", "refine"]
    assert not ans.refused and "1887" in ans.answer
    assert {c.doc_id for c in ans.citations} == {"bridge.md"}


def test_ambiguous_with_external_provider_adds_graded_external_results(coll: Collection) -> None:
    url = "https://example.org/zorblat-paint"
    snippet = "The Zorblat Bridge was repainted green in 1999 by the Ostria council."
    provider = ListProvider([(url, snippet)])
    grade = keyword_scorer("repainted", hi=0.9, lo=0.5)  # internal chunks are borderline, the web result is not
    agent = build_agent(coll, grade=grade, refine=keyword_scorer("repainted"), search=provider)
    ans = ask(agent, "When was the Zorblat Bridge repainted?")

    nodes = ans.trace.nodes()
    assert nodes[:6] == ["condense", "retrieve", "grade", "external_search", "grade", "refine"]
    assert [r.decision for r in records(ans, "grade")] == ["AMBIGUOUS", "CORRECT"]
    ext = records(ans, "external_search")[0]
    assert provider.queries == [ext.detail.query]
    assert ext.detail.urls == [url]
    # the external result is data like any chunk: graded, refined, cited by its URL
    assert not ans.refused
    assert url in {c.doc_id for c in ans.citations}
    assert "1999" in ans.answer
    graded_ext = [c for c in ans.hits if c.source == "external"]
    assert [c.doc_id for c in graded_ext] == [url] and graded_ext[0].grade == 0.9


def test_ambiguous_with_collection_provider_searches_the_second_collection(coll: Collection, web: Collection) -> None:
    provider = CollectionProvider.for_collection("web", Settings(), config=HASHED.retrieval)
    grade = keyword_scorer("repainted", hi=0.95, lo=0.5)
    agent = build_agent(coll, grade=grade, refine=keyword_scorer("repainted"), search=provider)
    try:
        ans = ask(agent, "When was the Zorblat Bridge repainted green?")
    finally:
        asyncio.run(provider.aclose())
    ext = records(ans, "external_search")[0]
    web_docs = set(chunk_docs(web).values())
    assert ext.decision.endswith("from collection:web")
    assert set(ext.detail.chunk_ids) <= set(chunk_docs(web))
    assert not ans.refused
    assert {c.doc_id for c in ans.citations} == {"news/paint.md"} <= web_docs
    assert "1999" in ans.answer


# --- INCORRECT -------------------------------------------------------------------------------------


def test_incorrect_rewrites_within_budget_then_refuses_naming_what_was_searched(coll: Collection) -> None:
    config = cfg(budgets={"max_rewrites": 2})
    agent = build_agent(coll, config, grade=fixed(0.05))
    ans = ask(agent, "Which submarine cable lands at Port Kessel?")

    rewrites = records(ans, "rewrite")
    assert len(rewrites) == config.agent.budgets.max_rewrites
    assert all(r.detail.purpose == "internal" for r in rewrites)
    assert ans.refused and ans.termination_reason == "no_grounded_context"
    assert ans.citations == [] and ans.trace.nodes()[-1] == "refuse"
    assert all(r.decision == "INCORRECT" for r in records(ans, "grade"))
    # every query that went to the knowledge base is named in the refusal
    searched = searched_queries(ans)
    assert len(searched) == 1 + sum(not r.detail.duplicate for r in rewrites)
    for q in searched:
        assert f'"{q}"' in ans.answer
    assert "'kb'" in ans.answer


def test_duplicate_rewrite_is_not_retried_but_counts_toward_the_budget(coll: Collection) -> None:
    # no question words: the offline keyword rewrite equals the question itself
    question = "zorblat bridge paint colour"
    config = cfg(budgets={"max_rewrites": 1})
    agent = build_agent(coll, config, grade=fixed(0.05))
    ans = ask(agent, question)
    rw = records(ans, "rewrite")
    assert len(rw) == 1 and rw[0].detail.duplicate is True
    assert "not retried" in rw[0].decision
    assert ans.trace.nodes() == ["condense", "retrieve", "grade", "rewrite", "refuse"]
    assert ans.graph_state["rewrites"] == config.agent.budgets.max_rewrites
    assert searched_queries(ans) == [question]


def test_duplicate_rewrite_moves_on_to_the_next_rewrite(coll: Collection) -> None:
    config = cfg(budgets={"max_rewrites": 3})
    agent = build_agent(coll, config, grade=fixed(0.05))
    ans = ask(agent, "zorblat bridge paint colour")
    nodes = ans.trace.nodes()
    rw_idx = [i for i, n in enumerate(nodes) if n == "rewrite"]
    assert len(rw_idx) == config.agent.budgets.max_rewrites
    for i in rw_idx:
        dup = ans.trace.records[i].detail.duplicate
        assert (nodes[i + 1] != "retrieve") == dup  # a duplicate never reaches the retriever
    assert ans.trace.records[rw_idx[0]].detail.duplicate
    assert ans.refused and ans.termination_reason == "no_grounded_context"


# --- external search failing ---------------------------------------------------------------------------


def test_external_search_timeout_degrades_to_internal_only_and_says_so(coll: Collection) -> None:
    slow = SlowProvider()
    guarded = GuardedProvider(slow, timeout_s=0.05)
    agent = build_agent(coll, grade=fixed(0.5), refine=keyword_scorer("1887"), search=guarded)
    ans = ask(agent, Q_BRIDGE)
    ext = records(ans, "external_search")
    assert len(ext) == 1 and ext[0].decision == "degraded"
    assert "SearchTimeout" in ans.graph_state["external_note"] or "no answer within" in ext[0].detail.error
    assert "0.05 s" in ext[0].detail.error
    assert len(slow.queries) == 1
    # internal-only answer, and the user is told the external search failed
    assert not ans.refused and "1887" in ans.answer
    assert "external search failed" in ans.answer.lower()


def test_external_search_failure_on_incorrect_is_named_in_the_refusal(coll: Collection) -> None:
    provider = FailingProvider()
    config = cfg(budgets={"max_rewrites": 2})
    agent = build_agent(coll, config, grade=fixed(0.05), search=provider)
    ans = ask(agent, "Which submarine cable lands at Port Kessel?")
    nodes = ans.trace.nodes()
    assert "external_search" in nodes
    rw = records(ans, "rewrite")
    assert rw[0].detail.purpose == "external"  # INCORRECT: the first rewrite is for the web
    assert all(r.detail.purpose == "internal" for r in rw[1:])
    ext = records(ans, "external_search")
    assert len(ext) == 1 and ext[0].decision == "degraded"
    assert provider.queries == [rw[0].detail.query]
    assert ans.refused and ans.termination_reason == "no_grounded_context"
    assert "failing: no answer within 3 s" in ans.answer
    assert f'"{rw[0].detail.query}"' in ans.answer


# --- ablations -------------------------------------------------------------------------------------


def test_refinement_off_passes_whole_chunks_and_cites_every_sentence(coll: Collection) -> None:
    refine = keyword_scorer("1887")
    config = cfg(refine=False)
    agent = build_agent(coll, config, grade=keyword_scorer("Zorblat Bridge was completed"), refine=refine)
    assert agent.runtime.config.agent.refine is False
    ans = ask(agent, Q_BRIDGE)
    rec = records(ans, "refine")[0]
    assert rec.decision.startswith("refinement off")
    assert refine.calls == []  # the strip scorer is never asked
    texts = chunk_texts(coll)
    kept = ans.kept
    assert kept and all(s.text == texts[s.chunk_id] for s in kept)
    # the whole chunk is in the answer, including the sentence refinement would have dropped
    bridge = next(t for t in texts.values() if "Zorblat Bridge was completed" in t)
    assert not ans.refused
    assert "1887" in ans.answer and "It spans the river Vell" in bridge and "It spans the river Vell" in ans.answer
    assert records(ans, "validate_citations")[-1].decision == "all sentences cited and supported"


def test_rewrite_off_goes_straight_to_refusal(coll: Collection) -> None:
    agent = build_agent(coll, cfg(rewrite=False), grade=fixed(0.05))
    ans = ask(agent, "Which submarine cable lands at Port Kessel?")
    assert ans.trace.nodes() == ["condense", "retrieve", "grade", "refuse"]
    assert ans.refused and ans.termination_reason == "no_grounded_context"


def test_critique_off_ends_with_validated(coll: Collection) -> None:
    agent = build_agent(coll, cfg(critique=False), grade=keyword_scorer("Zorblat"), refine=keyword_scorer("1887"))
    ans = ask(agent, Q_BRIDGE)
    assert "critique" not in ans.trace.nodes()
    assert ans.trace.nodes()[-2:] == ["validate_citations", "finalize"]
    assert ans.termination_reason == "validated" and not ans.refused
    assert ans.cycles == [] and ans.graph_state["cycle"] == 0


def test_validation_off_lets_the_draft_through_unchecked(coll: Collection) -> None:
    draft = "The Zorblat Bridge opened long ago [9]. It was built by giants without any doubt at all."
    chat = RoutedChat(generate=lambda _p, _n: draft)
    support = FunctionScorer(lambda _a, _b: 0.0)
    agent = build_agent(coll, cfg(validate_citations=False, critique=False), chat=chat, support=support)
    ans = ask(agent, Q_BRIDGE)
    assert records(ans, "validate_citations")[0].decision == "citation validation off"
    assert support.calls == []
    assert ans.answer == draft and not ans.refused
    assert ans.citations == []  # [9] names no source, so no citation is returned for it
    assert len(chat.prompts["generate"]) == 1


# --- the trace -------------------------------------------------------------------------------------


def _updates(agent: Agent, question: str) -> list[tuple[str, dict[str, Any]]]:
    async def go() -> list[tuple[str, dict[str, Any]]]:
        graph = agent._graph.compile()
        out = []
        async for chunk in graph.astream(turn_input(question), {"recursion_limit": 60}, stream_mode="updates"):
            out += [(node, upd) for node, upd in chunk.items()]
        return out

    return asyncio.run(go())


def test_every_node_appends_exactly_one_trace_record(coll: Collection) -> None:
    config = cfg(budgets={"max_rewrites": 1})
    agent = build_agent(coll, config, grade=fixed(0.05), search=ListProvider([]))
    updates = _updates(agent, "Which submarine cable lands at Port Kessel?")
    assert len(updates) >= 5
    for i, (node, upd) in enumerate(updates, start=1):
        assert len(upd["trace"]) == 1 and isinstance(upd["trace"][0], TraceRecord)
        assert upd["trace"][0].node == node
        assert upd["steps"] == i  # each node counts exactly one step


def test_trace_summary_matches_the_path_and_stream_events(coll: Collection) -> None:
    config = cfg(budgets={"max_rewrites": 2, "max_cycles": 2, "plateau_cycles": 3})
    # a question naming something the corpus lacks keeps the critique loop going
    agent = build_agent(coll, config, grade=keyword_scorer("Zorblat", lo=0.2))

    async def go() -> tuple[list[str], Any]:
        events = [ev async for ev in agent.astream("When did Krellmark paint the Zorblat Bridge?")]
        last = events[-1]
        assert isinstance(last, AnswerEvent)
        return [e.node for e in events if isinstance(e, NodeEvent)], last.answer

    streamed, ans = asyncio.run(go())
    s = ans.trace.summary()
    nodes = ans.trace.nodes()
    assert streamed == nodes == s["path"]
    assert s["steps"] == len(nodes) == ans.steps
    assert s["rewrites"] == nodes.count("rewrite") == ans.graph_state["rewrites"]
    assert s["critique_cycles"] == nodes.count("critique") == ans.graph_state["cycle"] == len(ans.cycles)
    assert s["critique_cycles"] == config.agent.budgets.max_cycles
    assert s["retrievals"] == nodes.count("retrieve") == 1 + s["critique_cycles"] - 1
    assert s["termination_reason"] == ans.termination_reason == "max_cycles"
    assert s["verdicts"] == [r.decision for r in records(ans, "grade")]


def test_trace_json_round_trip(coll: Collection) -> None:
    agent = build_agent(coll, grade=fixed(0.5), refine=keyword_scorer("1887"), search=FailingProvider())
    ans = ask(agent, Q_BRIDGE)
    data = ans.trace.to_json()
    text = json.dumps(data)  # plain JSON
    back = Trace.from_json(json.loads(text), ans.trace.termination_reason)
    assert back.to_json() == data
    assert back.summary() == ans.trace.summary()
    assert [r.node for r in back.records] == ans.trace.nodes()
    assert ans.to_json(with_trace=True)["trace"] == data
    json.dumps(ans.to_json(with_trace=True))
