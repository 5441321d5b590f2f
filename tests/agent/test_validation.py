"""validate_citations with a scripted chat model: the hallucination gate, invalid and missing
citations, unsupported sentences (retried, then cut), and corrections that live for one turn."""

from __future__ import annotations

import asyncio
import re

from ragloop.agent.memory import open_checkpointer
from ragloop.models.scoring import FunctionScorer
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import (
    RoutedChat,
    ask,
    build_agent,
    cfg,
    cited_numbers,
    first_sentence,
    keyword_scorer,
    records,
    sources_in,
)

Q = "When was the Zorblat Bridge completed?"
CORRECTION_HEADER = "Your previous answer had problems"


def bridge_source(prompt: str) -> int:
    """The number the prompt gives the source about the bridge's completion."""
    return next(n for n, body in sources_in(prompt).items() if "completed in 1887" in body)


def good_answer(prompt: str) -> str:
    n = bridge_source(prompt)
    return f"{first_sentence(sources_in(prompt)[n])} [{n}]."


def corrections_of(prompt: str) -> list[str]:
    if CORRECTION_HEADER not in prompt:
        return []
    block = prompt.split("Fix all of them:", 1)[1].split("\n\nSources:", 1)[0]
    return [line[2:] for line in block.strip().splitlines() if line.startswith("- ")]


def test_hallucination_gate_retries_with_corrections_then_falls_back_to_extraction(coll: Collection) -> None:
    """A chat model that never cites is corrected `max_citation_retries` times; then the turn
    answers with the offline extractive composer (validated like any draft), not a refusal."""
    config = cfg(budgets={"max_citation_retries": 2})
    chat = RoutedChat(generate=lambda _p, _n: "The Zorblat Bridge is very old and famous across the region.")
    agent = build_agent(coll, config, chat=chat, grade=keyword_scorer("Zorblat"))
    ans = ask(agent, Q)

    retries = config.agent.budgets.max_citation_retries
    gens = chat.prompts["generate"]
    assert len(gens) == retries + 1  # the fallback draft is composed offline: no further model call
    assert corrections_of(gens[0]) == []
    for p in gens[1:]:
        assert any("Cite the sources" in c for c in corrections_of(p))
    decisions = [r.decision for r in records(ans, "validate_citations")]
    assert decisions[: retries + 1] == ["hallucination gate: no valid citation (retry)"] * retries + [
        "hallucination gate: no valid citation: extractive fallback"
    ]
    assert records(ans, "generate")[-1].decision.startswith("extractive fallback")
    assert not ans.refused and ans.citations
    assert "very old" not in ans.answer and "1887" in ans.answer


def test_extractive_fallback_that_fails_validation_refuses(coll: Collection) -> None:
    """The fallback happens once; when the extracted sentences are not supported either, the
    turn refuses: nothing unvalidated is ever shown."""
    config = cfg(budgets={"max_citation_retries": 1})
    chat = RoutedChat(generate=lambda _p, _n: "The Zorblat Bridge is very old and famous across the region.")
    never = FunctionScorer(lambda _a, _b: 0.0, name="test:never")
    agent = build_agent(coll, config, chat=chat, grade=keyword_scorer("Zorblat"), support=never)
    ans = ask(agent, Q)
    decisions = [r.decision for r in records(ans, "validate_citations")]
    assert decisions.count("hallucination gate: no valid citation: extractive fallback") == 1
    assert "fallback" not in decisions[-1]
    assert ans.refused and ans.citations == [] and "very old" not in ans.answer
    assert ans.trace.nodes()[-1] == "refuse"


def test_offline_unsupported_draft_is_regenerated_without_it_then_gated(coll: Collection) -> None:
    """Offline: the composer leaves out the sentences the validator rejected; when nothing is
    left the gate refuses at once (regenerating offline cannot add a citation)."""
    config = cfg(budgets={"max_citation_retries": 2})
    agent = build_agent(coll, config, grade=keyword_scorer("Zorblat"), support=FunctionScorer(lambda _a, _b: 0.05))
    ans = ask(agent, Q)
    decisions = [r.decision for r in records(ans, "validate_citations")]
    assert decisions[0].endswith("regenerate (1/2)")
    assert decisions[-1] == "hallucination gate: no valid citation (gate)"
    gens = records(ans, "generate")
    assert gens[-1].detail.avoided and ans.graph_state["pending_answer"] == ""
    assert ans.refused and ans.termination_reason == "no_valid_citations" and ans.citations == []


def test_a_nonexistent_citation_is_named_in_the_correction(coll: Collection) -> None:
    def gen(prompt: str, n: int) -> str:
        good = good_answer(prompt)
        return good if n else f"{good} It spans the river Vell with a span of 420 metres [9]."

    chat = RoutedChat(generate=gen)
    agent = build_agent(coll, chat=chat, grade=keyword_scorer("Zorblat"))
    ans = ask(agent, Q)
    gens = chat.prompts["generate"]
    assert len(gens) == 2
    n_sources = len(sources_in(gens[0]))
    assert n_sources < 9
    assert "Source [9] does not exist." in corrections_of(gens[1])
    assert records(ans, "validate_citations")[0].detail.invalid_ids == [9]
    assert not ans.refused and "[9]" not in ans.answer
    assert cited_numbers(ans.answer) == {c.n for c in ans.citations}


def test_an_answer_citing_only_a_nonexistent_source_is_told_which(coll: Collection) -> None:
    def gen(prompt: str, n: int) -> str:
        return good_answer(prompt) if n else "The Zorblat Bridge was completed in 1887 [9]."

    chat = RoutedChat(generate=gen)
    agent = build_agent(coll, chat=chat, grade=keyword_scorer("Zorblat"))
    ans = ask(agent, Q)
    gens = chat.prompts["generate"]
    assert len(gens) == 2
    assert any("[9]" in c for c in corrections_of(gens[1]))
    assert not ans.refused and "[9]" not in ans.answer


def test_an_uncited_sentence_is_corrected_on_retry(coll: Collection) -> None:
    uncited = "It spans the river Vell with a main span of 420 metres."

    def gen(prompt: str, n: int) -> str:
        good, src = good_answer(prompt), bridge_source(prompt)
        return f"{good} {uncited}" if n == 0 else f"{good} {uncited[:-1]} [{src}]."

    chat = RoutedChat(generate=gen)
    agent = build_agent(coll, chat=chat, grade=keyword_scorer("Zorblat"))
    ans = ask(agent, Q)
    gens = chat.prompts["generate"]
    assert len(gens) == 2
    fixes = corrections_of(gens[1])
    assert any(c.startswith("Add a citation to:") and uncited[:-1] in c for c in fixes)
    assert [r.decision for r in records(ans, "validate_citations")][-1] == "all sentences cited and supported"
    assert "420 metres" in ans.answer and not ans.refused
    # every sentence of what is shown carries a citation that was returned
    body = ans.answer.split("\n\nNote:")[0]
    for sentence in re.split(r"(?<=[.!?])\s+", body):
        assert cited_numbers(sentence) and cited_numbers(sentence) <= {c.n for c in ans.citations}


def test_an_unsupported_sentence_is_retried_then_cut(coll: Collection) -> None:
    bad = "The Zorblat Bridge is painted bright purple every spring"

    def gen(prompt: str, _n: int) -> str:
        return f"{good_answer(prompt)} {bad} [{bridge_source(prompt)}]."

    support = FunctionScorer(lambda claim, _ctx: 0.05 if "purple" in claim else 0.9)
    config = cfg(budgets={"max_citation_retries": 2})
    chat = RoutedChat(generate=gen)
    agent = build_agent(coll, config, chat=chat, grade=keyword_scorer("Zorblat"), support=support)
    ans = ask(agent, Q)

    retries = config.agent.budgets.max_citation_retries
    assert len(chat.prompts["generate"]) >= retries + 1
    first_cycle = chat.prompts["generate"][: retries + 1]
    for p in first_cycle[1:]:
        assert any(c.startswith(f"The cited source does not support: '{bad}.'") for c in corrections_of(p))
    decisions = [r.decision for r in records(ans, "validate_citations")]
    assert decisions[retries].startswith("retries spent: cut 1 sentences")
    # the claim was judged against the chunk it cites
    assert any(kind == "support" and "purple" in a and "Zorblat" in b for kind, a, b in support.calls)
    assert "purple" not in ans.answer and "1887" in ans.answer and not ans.refused


def test_invalid_markers_are_removed_when_retries_are_spent(coll: Collection) -> None:
    """A kept sentence that also cites a non-existent source must not show that marker."""

    def gen(prompt: str, _n: int) -> str:
        src = bridge_source(prompt)
        return f"{first_sentence(sources_in(prompt)[src])} [{src}][7]."

    config = cfg(critique=False, budgets={"max_citation_retries": 1})
    chat = RoutedChat(generate=gen)
    agent = build_agent(coll, config, chat=chat, grade=keyword_scorer("Zorblat"))
    ans = ask(agent, Q)
    assert len(chat.prompts["generate"]) == 2
    assert not ans.refused and "1887" in ans.answer
    assert "[7]" not in ans.answer
    assert cited_numbers(ans.answer) == {c.n for c in ans.citations}


def test_corrections_are_transient_per_turn(coll: Collection) -> None:
    uncited = "It spans the river Vell with a main span of 420 metres."

    def gen(prompt: str, n: int) -> str:
        good = good_answer(prompt)
        return f"{good} {uncited}" if n == 0 else good

    chat = RoutedChat(generate=gen)
    agent = build_agent(coll, chat=chat, grade=keyword_scorer("Zorblat"))
    first = ask(agent, Q, thread_id="t-corr")
    assert any(r.detail.corrections for r in records(first, "generate"))

    second = ask(agent, "When was the Zorblat Bridge completed, and by whom?", thread_id="t-corr")
    gens2 = records(second, "generate")
    assert gens2[0].detail.corrections == []
    n_first = len(records(first, "generate"))
    assert CORRECTION_HEADER not in chat.prompts["generate"][n_first]
    assert second.graph_state["corrections"] == [] and second.graph_state["citation_retries"] == 0

    async def checkpoint() -> dict:
        async with open_checkpointer(agent.checkpointer_url) as saver:
            graph = agent._graph.compile(checkpointer=saver)
            return (await graph.aget_state({"configurable": {"thread_id": "t-corr"}})).values

    values = asyncio.run(checkpoint())
    assert values["corrections"] == [] and values["citation_retries"] == 0


def test_corrections_do_not_leak_into_the_next_critique_cycle(coll: Collection) -> None:
    """After a draft passes validation, the next cycle's regeneration gets no stale corrections."""
    uncited = "It spans the river Vell with a main span of 420 metres."

    def gen(prompt: str, n: int) -> str:
        good = good_answer(prompt)
        return f"{good} {uncited}" if n == 0 else good

    deficiency = (
        '{"deficiencies": [{"type": "missing_aspect", "description": "no engineer named", '
        '"affected_section": "engineer", "suggested_correction_query": "Zorblat Bridge engineer", '
        '"severity": 0.8}], "overall_score": 0.4}'
    )
    chat = RoutedChat(
        generate=gen, critique=lambda _p, n: deficiency if n == 0 else '{"deficiencies": [], "overall_score": 1}'
    )
    agent = build_agent(coll, chat=chat, grade=keyword_scorer("Zorblat"))
    ans = ask(agent, Q)
    gens = records(ans, "generate")
    assert len(gens) == 3  # draft, corrected draft, next cycle's draft
    assert gens[1].detail.corrections
    assert gens[2].detail.corrections == []
    assert CORRECTION_HEADER not in chat.prompts["generate"][2]


def test_a_later_cycles_failed_draft_keeps_the_answer_validated_before(coll: Collection) -> None:
    """The critique asks for more; the regenerated draft never gets a valid citation: the turn
    ends with the earlier validated answer (the loop could not improve it), not with a refusal."""

    def gen(prompt: str, n: int) -> str:
        return good_answer(prompt) if n == 0 else "The bridge is also haunted, everyone says so."

    deficiency = (
        '{"deficiencies": [{"type": "missing_aspect", "description": "no engineer named", '
        '"affected_section": "engineer", "suggested_correction_query": "Zorblat Bridge engineer", '
        '"severity": 0.8}], "overall_score": 0.4}'
    )
    config = cfg(budgets={"max_citation_retries": 1, "max_cycles": 4})
    chat = RoutedChat(generate=gen, critique=lambda _p, _n: deficiency)
    agent = build_agent(coll, config, chat=chat, grade=keyword_scorer("Zorblat"))
    ans = ask(agent, Q)
    decisions = [r.decision for r in records(ans, "validate_citations")]
    assert decisions[0] == "all sentences cited and supported"
    assert decisions[-1] == "hallucination gate: no valid citation (gate)"
    assert ans.trace.nodes()[-1] == "finalize"
    assert not ans.refused and ans.termination_reason == "plateau"
    first = records(ans, "generate")[0]
    assert ans.answer.startswith(good_answer(chat.prompts["generate"][0]))
    assert "haunted" not in ans.answer
    assert {c.chunk_id for c in ans.citations} <= set(first.detail.sources)
    assert ans.residual_deficiencies == ["Not fully resolved: no engineer named"]
