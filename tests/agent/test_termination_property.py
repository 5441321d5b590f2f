"""Budgets end every turn with a named reason, and a property test: with random scorers, random
model replies and random budgets and switches, the graph always ends, within its step budget,
with a known termination reason, and never shows an answer that did not pass validation."""

from __future__ import annotations

import hashlib
import random
import re
import time
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragloop.agent.api import Agent
from ragloop.agent.search import SearchTimeout
from ragloop.agent.types import REFUSAL_REASONS, TerminationReason
from ragloop.config import PipelineConfig
from ragloop.models.chat.testing import TestModel
from ragloop.models.errors import ModelTimeoutError
from ragloop.models.scoring import FixedScorer, FunctionScorer
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import (
    DOCS,
    ListProvider,
    RoutedChat,
    ask,
    build_agent,
    cfg,
    cited_numbers,
    keyword_scorer,
    make_collection,
    records,
)

Q = "When was the Zorblat Bridge completed?"
Q_LOOP = "When did Krellmark paint the Zorblat Bridge?"  # the corpus never names Krellmark: critique keeps going
REASONS = set(get_args(TerminationReason))
# routers check the budgets after grade, rewrite, refine, validate and critique: at most this many
# nodes run after the step budget is spent (e.g. generate, validate, then finalize), or 4 on the shortest path
STEP_MARGIN = 2


def test_step_budget_refuses_when_nothing_was_validated(coll: Collection) -> None:
    config = cfg(budgets={"max_steps": 1})
    ans = ask(build_agent(coll, config), Q)
    assert ans.termination_reason == "budget_steps"
    assert ans.refused and ans.citations == []
    assert ans.trace.nodes() == ["condense", "retrieve", "grade", "refuse"]
    assert len(ans.trace.records) <= max(config.agent.budgets.max_steps + STEP_MARGIN, 4)


def test_step_budget_keeps_the_validated_answer(coll: Collection) -> None:
    unbounded = cfg(budgets={"max_cycles": 5, "plateau_cycles": 5, "max_attempts_per_deficiency": 5})
    full = ask(build_agent(coll, unbounded, grade=keyword_scorer("Zorblat", lo=0.2)), Q_LOOP)
    nodes = full.trace.nodes()
    # stop right after the second retrieval has been graded: a validated answer exists by then
    max_steps = [i for i, n in enumerate(nodes) if n == "grade"][1] + 1
    assert "validate_citations" in nodes[:max_steps]
    config = unbounded.with_overrides(agent={"budgets": {"max_steps": max_steps}})
    ans = ask(build_agent(coll, config, grade=keyword_scorer("Zorblat", lo=0.2)), Q_LOOP)
    assert ans.termination_reason == "budget_steps"
    assert not ans.refused and ans.citations
    assert ans.trace.nodes() == [*nodes[:max_steps], "finalize"]
    # what is shown is the draft that passed validation (the only one by then)
    assert [r.decision for r in records(ans, "validate_citations")] == ["all sentences cited and supported"]
    assert ans.answer.split("\n\nNote:")[0] == ans.graph_state["validated_answer"]
    assert cited_numbers(ans.answer) <= {c.n for c in ans.citations}
    assert "Krellmark" in " ".join(ans.residual_deficiencies)


def test_step_budget_mid_cycle_keeps_the_earlier_validated_answer(coll: Collection) -> None:
    """The budget runs out while a later cycle's draft is being corrected: the turn ends with the
    answer the earlier cycle validated, not with a refusal."""

    def gen(prompt: str, n: int) -> str:
        return "The Zorblat Bridge was completed in 1887 [1]." if n == 0 else "It is old and nobody knows more."

    crit = '{"deficiencies": [{"type": "missing_aspect", "description": "no engineer", "affected_section": "engineer", "suggested_correction_query": "engineer", "severity": 0.7}], "overall_score": 0.3}'  # noqa: E501
    chat = RoutedChat(generate=gen, critique=lambda _p, _n: crit)
    base = cfg(budgets={"max_cycles": 4, "max_citation_retries": 2})
    full = ask(build_agent(coll, base, chat=chat, grade=keyword_scorer("Zorblat")), Q)
    nodes = full.trace.nodes()
    second_check = [i for i, n in enumerate(nodes) if n == "validate_citations"][1]
    assert full.trace.records[second_check].decision.endswith("(retry)")

    config = base.with_overrides(agent={"budgets": {"max_steps": second_check + 1}})
    chat2 = RoutedChat(generate=gen, critique=lambda _p, _n: crit)
    ans = ask(build_agent(coll, config, chat=chat2, grade=keyword_scorer("Zorblat")), Q)
    assert ans.trace.nodes() == [*nodes[: second_check + 1], "finalize"]
    assert ans.termination_reason == "budget_steps" and not ans.refused
    assert ans.answer.startswith("The Zorblat Bridge was completed in 1887 [1].")
    assert "nobody knows" not in ans.answer
    assert [c.n for c in ans.citations] == [1]


def test_model_call_budget(coll: Collection) -> None:
    chat = RoutedChat(
        critique=lambda _p, n: (
            f'{{"deficiencies": [{{"type": "missing_aspect", "description": "d", "affected_section": "s{n}", '
            '"suggested_correction_query": "q", "severity": 0.9}], "overall_score": 0.1}'
        )
    )
    config = cfg(budgets={"max_model_calls": 3, "max_cycles": 10, "plateau_cycles": 10})
    ans = ask(build_agent(coll, config, chat=chat, grade=keyword_scorer("Zorblat")), Q)
    assert ans.termination_reason == "budget_model_calls"
    calls = sum(len(v) for v in chat.prompts.values())
    assert ans.model_calls == calls >= config.agent.budgets.max_model_calls
    assert calls <= config.agent.budgets.max_model_calls + 1
    assert not ans.refused  # a validated answer existed when the budget ran out


def test_model_call_budget_of_zero_refuses_before_any_call(coll: Collection) -> None:
    chat = RoutedChat()
    ans = ask(build_agent(coll, cfg(budgets={"max_model_calls": 0}), chat=chat), Q)
    assert ans.termination_reason == "budget_model_calls" and ans.refused
    assert sum(len(v) for v in chat.prompts.values()) == 0


def test_model_call_budget_does_not_apply_offline(coll: Collection) -> None:
    ans = ask(build_agent(coll, cfg(budgets={"max_model_calls": 0})), Q)
    assert ans.termination_reason != "budget_model_calls" and not ans.refused


def test_time_budget(coll: Collection) -> None:
    ans = ask(build_agent(coll, cfg(budgets={"max_seconds": 1e-6})), Q)
    assert ans.termination_reason == "budget_time" and ans.refused and ans.citations == []
    assert ans.trace.nodes()[-1] == "refuse"


class TightAgent(Agent):
    """LangGraph's recursion limit far below the step budget."""

    def _limits(self, thread_id: str | None) -> dict[str, Any]:
        return {**super()._limits(thread_id), "recursion_limit": 3}


def test_recursion_limit_ends_the_turn_with_a_named_refusal(coll: Collection) -> None:
    """Not reachable through the config: `recursion_limit` is max_steps + 10 and the routers stop a
    turn within max_steps + STEP_MARGIN nodes (the property test below checks that), so the limit
    is forced by a subclass to test how the API handles LangGraph's GraphRecursionError."""
    agent = build_agent(coll, agent_cls=TightAgent)
    ans = ask(agent, Q)
    assert ans.termination_reason == "recursion_limit"
    assert ans.refused and ans.citations == [] and ans.answer
    assert len(ans.trace.records) <= 3
    # the thread survives: the next turn on it runs to the end normally
    ans1 = ask(agent, Q, thread_id="t-rec")
    assert ans1.termination_reason == "recursion_limit"
    ok = ask(build_agent(coll), Q, thread_id="t-rec")
    assert ok.termination_reason == "converged" and not ok.refused


# --- the property ---------------------------------------------------------------------------------


def seeded(seed: int, kind: str, low: float, high: float) -> FunctionScorer:
    """A deterministic pseudo-random scorer: the score of a pair depends on the seed and the pair."""

    def fn(a: str, b: str) -> float:
        h = hashlib.sha256(f"{seed}|{kind}|{a}|{b}".encode()).digest()
        return low + (high - low) * int.from_bytes(h[:4], "big") / 2**32

    return FunctionScorer(fn, name=f"test:seeded-{kind}")


REPLIES = [
    "The Zorblat Bridge was completed in 1887 [1].",
    "The Zorblat Bridge was completed in 1887 [1][2]. It spans the river Vell with a main span of 420 metres.",
    "It was completed in 1887 [2]. Trams cross it [3]. Also [9] says so [9].",
    "The Zorblat Bridge was completed in 1887 by Marta Quill [1][9].",
    "The Zorblat Bridge was completed in 1887 [1]. It is 420 metres long [1][8]. Uncited claims about the bridge.",
    "I don't know based on the provided documents.",
    "]]][[ junk {{ not json",
    "",
    '{"deficiencies": [{"type": "missing_aspect", "description": "no [2] engineer", "affected_section": "eng", '
    '"suggested_correction_query": "engineer", "severity": 0.8}], "overall_score": 0.2}',
    '{"deficiencies": [], "overall_score": 0.9}',
    '{"query": "zorblat bridge"}',
    "[1] [2] [3]",
]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    seed = draw(st.integers(0, 2**31 - 1))
    use_chat = draw(st.sampled_from([True, True, False]))
    script: list[Any] = []
    if use_chat:
        for _ in range(draw(st.integers(0, 12))):
            script.append(
                ModelTimeoutError("scripted failure")
                if draw(st.integers(0, 9)) == 0
                else draw(st.sampled_from(REPLIES))
            )
    return {
        "seed": seed,
        "chat": use_chat,
        "script": script,
        "default": draw(st.sampled_from(REPLIES)),
        "grade": draw(st.sampled_from([(0.0, 0.4), (0.2, 0.8), (0.5, 1.0), (0.0, 1.0)])),
        "refine": draw(st.sampled_from([(0.0, 0.5), (0.3, 1.0), (0.0, 1.0)])),
        "support": draw(st.sampled_from([(0.0, 0.6), (0.4, 1.0), (0.0, 1.0)])),
        "search": draw(st.sampled_from([None, "list", "failing"])),
        "agent": {
            "refine": draw(st.booleans()),
            "rewrite": draw(st.booleans()),
            "critique": draw(st.booleans()),
            "validate_citations": draw(st.sampled_from([True, True, True, False])),
            "max_answer_sentences": draw(st.integers(1, 3)),
            "budgets": {
                "max_steps": draw(st.sampled_from([40, 25, 60, 12, 9, 6, 3, 1])),
                "max_model_calls": draw(st.sampled_from([20, 12, 8, 5, 3, 2, 1, 0])),
                "max_rewrites": draw(st.integers(0, 3)),
                "max_citation_retries": draw(st.integers(0, 3)),
                "max_cycles": draw(st.integers(0, 4)),
                "plateau_cycles": draw(st.integers(1, 3)),
                "max_attempts_per_deficiency": draw(st.integers(1, 3)),
                "max_seconds": draw(st.sampled_from([120.0] * 9 + [1e-6])),
            },
        },
        "question": draw(st.sampled_from([Q, Q_LOOP, "Which submarine cable lands at Port Kessel?", "trams"])),
    }


class _Failing(ListProvider):
    async def search(self, query: str, k: int = 5) -> Any:
        raise SearchTimeout("scripted timeout")


@pytest.fixture(scope="module")
def shared_coll(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import os

    home = tmp_path_factory.mktemp("home")
    before = os.environ.get("RAGLOOP_HOME")
    os.environ["RAGLOOP_HOME"] = str(home)
    try:
        c = make_collection("kb", DOCS, tmp_path_factory.mktemp("docs"))
    finally:
        if before is None:
            os.environ.pop("RAGLOOP_HOME", None)
        else:
            os.environ["RAGLOOP_HOME"] = before
    yield c
    c.close()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sc=scenarios())
def test_the_graph_always_ends_within_budget_with_a_named_reason(shared_coll: Collection, sc: dict[str, Any]) -> None:
    config: PipelineConfig = cfg(**sc["agent"])
    budgets = config.agent.budgets
    search = {
        None: None,
        "list": ListProvider([("https://example.org/z", "The Zorblat Bridge was repainted green in 1999.")]),
        "failing": _Failing([]),
    }[sc["search"]]
    chat = TestModel(list(sc["script"]), default_text=sc["default"]) if sc["chat"] else None
    rng = random.Random(sc["seed"])
    agent = build_agent(
        shared_coll,
        config,
        chat=chat,
        grade=seeded(rng.randrange(2**31), "grade", *sc["grade"]),
        refine=seeded(rng.randrange(2**31), "refine", *sc["refine"]),
        support=seeded(rng.randrange(2**31), "support", *sc["support"]),
        search=search,
    )
    ans = ask(agent, sc["question"])

    # it ended, within budget, with a known reason
    assert ans.termination_reason in REASONS
    assert ans.trace.nodes()[-1] in ("finalize", "refuse")
    steps = len(ans.trace.records)
    assert steps == ans.steps
    assert steps <= max(budgets.max_steps + STEP_MARGIN, 4)
    if chat is not None:
        assert ans.model_calls <= budgets.max_model_calls + 1 or ans.termination_reason != "budget_model_calls"
    # refusals are consistent
    if ans.termination_reason in REFUSAL_REASONS:
        assert ans.refused
    if ans.refused:
        assert ans.citations == [] and ans.answer and ans.trace.nodes()[-1] == "refuse"
        assert ans.termination_reason in REFUSAL_REASONS or ans.termination_reason.startswith(("budget_", "recursion_"))
        return
    assert ans.termination_reason not in REFUSAL_REASONS
    # never an unvalidated answer
    if config.agent.validate_citations:
        returned = {c.n for c in ans.citations}
        assert ans.citations, ans.answer
        assert cited_numbers(ans.answer) <= returned
        assert returned <= cited_numbers(ans.answer)
        known = {c.chunk_id for c in ans.hits}
        assert {c.chunk_id for c in ans.citations} <= known
        checks = records(ans, "validate_citations")
        assert checks and any(
            r.decision == "all sentences cited and supported" or r.decision.startswith("retries spent") for r in checks
        )
        body = ans.answer.split("\n\nNote:")[0]
        assert body == ans.graph_state["validated_answer"].strip()
    assert re.search(r"\S", ans.answer) or not config.agent.validate_citations


def test_an_agent_built_from_a_runtime_uses_the_runtime_budgets(coll: Collection) -> None:
    """`Agent(collection, runtime=rt)` without a config runs under rt's config: its step budget,
    not the default one, decides when the turn ends (and LangGraph's recursion limit follows it)."""
    config = cfg(budgets={"max_steps": 70, "max_cycles": 30, "plateau_cycles": 30, "max_attempts_per_deficiency": 30})
    rt = build_agent(coll, config, grade=keyword_scorer("Zorblat", lo=0.2)).runtime
    agent = Agent(coll, runtime=rt)
    assert agent.config.version_id == config.version_id
    ans = ask(agent, Q_LOOP)
    assert ans.termination_reason == "budget_steps" and not ans.refused
    assert config.agent.budgets.max_steps <= len(ans.trace.records) <= config.agent.budgets.max_steps + STEP_MARGIN
    assert ans.pipeline_version == config.version_id


def slow_uncited(_prompt: str, _n: int) -> str:
    """A model slower than the test's 0.3 s turn budget whose drafts never cite."""
    time.sleep(0.4)
    return "It was finished long ago."


def test_a_chat_model_out_of_time_without_a_valid_draft_answers_extractively_not_refuses(coll: Collection) -> None:
    # the model is slow and cannot cite: by the time its draft fails validation the turn's time is
    # spent, and the context it was given still answers the question through the extractive composer
    config = cfg(budgets={"max_seconds": 0.3})
    ans = ask(build_agent(coll, config, chat=RoutedChat(generate=slow_uncited), grade=keyword_scorer("Zorblat")), Q)
    assert ans.termination_reason == "budget_time" and not ans.refused
    gens = records(ans, "generate")
    assert gens[-1].decision == "extractive: budget_time spent before a validated answer"
    assert "1887" in ans.answer and ans.citations and ans.trace.nodes()[-1] == "finalize"
    # the extractive draft was validated like any other
    assert records(ans, "validate_citations")[-1].decision == "all sentences cited and supported"


def test_an_out_of_time_extractive_draft_that_fails_validation_still_refuses(coll: Collection) -> None:
    config = cfg(budgets={"max_seconds": 0.3})
    agent = build_agent(
        coll, config, chat=RoutedChat(generate=slow_uncited), grade=keyword_scorer("Zorblat"), support=FixedScorer(0.0)
    )
    ans = ask(agent, Q)
    assert ans.refused and ans.termination_reason == "budget_time" and ans.citations == []
    # the model's draft, then exactly one extractive try: no loop
    decisions = [r.decision for r in records(ans, "generate")]
    assert len(decisions) == 2 and decisions[0].startswith("llm answer with")
    assert decisions[1] == "extractive: budget_time spent before a validated answer"
