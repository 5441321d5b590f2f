"""The grader's entity gate: an AMBIGUOUS question naming something no retrieved passage mentions
is INCORRECT, and the graph refuses instead of answering from a lexically similar chunk; a
CORRECT verdict stands."""

from __future__ import annotations

from ragloop.retrieval.collection import Collection
from tests.agent.conftest import ask, build_agent, cfg, keyword_scorer, records


def test_an_ambiguous_question_about_a_name_the_collection_never_mentions_is_refused(coll: Collection) -> None:
    # every chunk about the bridge grades 0.5 (AMBIGUOUS): without the gate it would be answered
    agent = build_agent(coll, cfg(entity_grounding=True), grade=keyword_scorer("Bridge", hi=0.5))
    ans = ask(agent, "Who painted the Golden Gate Bridge?")
    grades = records(ans, "grade")
    assert grades and all(r.decision == "INCORRECT" for r in grades)
    assert grades[0].detail.ungrounded_entities == ["Golden Gate Bridge"]
    assert "no retrieved passage mentions 'Golden Gate Bridge'" in grades[0].detail.reason
    assert ans.refused and not ans.citations


def test_a_name_the_collection_mentions_passes_the_gate(coll: Collection) -> None:
    agent = build_agent(coll, cfg(entity_grounding=True), grade=keyword_scorer("Zorblat", hi=0.9))
    ans = ask(agent, "When was the Zorblat Bridge completed?")
    first = records(ans, "grade")[0]
    assert first.decision == "CORRECT" and first.detail.ungrounded_entities == []
    assert not ans.refused and "1887" in ans.answer


def test_a_correct_verdict_stands_and_the_gate_can_be_switched_off(coll: Collection) -> None:
    high = build_agent(coll, cfg(entity_grounding=True), grade=keyword_scorer("Bridge", hi=0.9))
    first = records(ask(high, "Who painted the Golden Gate Bridge?"), "grade")[0]
    assert first.decision == "CORRECT" and first.detail.ungrounded_entities == []
    off = build_agent(coll, cfg(entity_grounding=False), grade=keyword_scorer("Bridge", hi=0.5))
    first = records(ask(off, "Who painted the Golden Gate Bridge?"), "grade")[0]
    assert first.decision == "AMBIGUOUS" and first.detail.ungrounded_entities == []


def test_only_the_names_of_the_current_turn_must_be_grounded(coll: Collection) -> None:
    # the follow-up's standalone question carries "Golden Gate Bridge" forward as context; the
    # Zorblat passages never mention it, and that must not refuse a question they answer
    agent = build_agent(coll, cfg(entity_grounding=True), grade=keyword_scorer("Bridge", hi=0.5))
    assert ask(agent, "Who painted the Golden Gate Bridge?", thread_id="t-gate").refused
    ans = ask(agent, "What about the Zorblat Bridge?", thread_id="t-gate")
    assert "Golden Gate Bridge" in ans.standalone_question
    first = records(ans, "grade")[0]
    assert first.decision == "AMBIGUOUS" and first.detail.ungrounded_entities == []
    assert not ans.refused
    # a name the user writes in this turn is still checked
    named = ask(agent, "What about the Golden Gate Bridge?", thread_id="t-gate")
    assert records(named, "grade")[0].detail.ungrounded_entities == ["Golden Gate Bridge"]
