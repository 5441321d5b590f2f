"""The LangGraph wiring: nodes bound to a runtime, routers, budgets.

Every router first checks the budgets (steps, model calls, wall clock); an exhausted budget
ends the turn: with the validated answer if there is one, else with a refusal, and always with
the budget named as the termination reason.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from langgraph.graph import END, START, StateGraph

from ragloop.agent.details import RewriteDetail, parse_detail
from ragloop.agent.nodes.condense import condense
from ragloop.agent.nodes.critique import critique
from ragloop.agent.nodes.external import external_search
from ragloop.agent.nodes.finalize import finalize, refuse
from ragloop.agent.nodes.generate import generate
from ragloop.agent.nodes.grade import grade
from ragloop.agent.nodes.refine import refine
from ragloop.agent.nodes.retrieve import retrieve
from ragloop.agent.nodes.rewrite import rewrite
from ragloop.agent.nodes.validate import validate_citations
from ragloop.agent.runtime import NodeResult, Runtime, budget_exceeded
from ragloop.agent.spans import node_attributes
from ragloop.agent.state import AgentState
from ragloop.agent.types import TraceRecord
from ragloop.models.chat import call_scope
from ragloop.tracing import set_attributes, span

NodeFn = Callable[[AgentState, Runtime], Awaitable[NodeResult]]
NODES: dict[str, NodeFn] = {
    "condense": condense,
    "retrieve": retrieve,
    "grade": grade,
    "refine": refine,
    "rewrite": rewrite,
    "external_search": external_search,
    "generate": generate,
    "validate_citations": validate_citations,
    "critique": critique,
    "finalize": finalize,
    "refuse": refuse,
}


def _bind(name: str, fn: NodeFn, rt: Runtime) -> Callable[[AgentState], Awaitable[dict[str, Any]]]:
    async def node(state: AgentState) -> dict[str, Any]:
        t0 = time.perf_counter()
        if name in ("finalize", "refuse") and not state.get("termination_reason"):
            reason = budget_exceeded(state, rt)
            if reason:
                state = {**state, "termination_reason": reason}
        # one span per step (its model calls are its children); its attributes are the step's record
        with span(name) as sp:
            with call_scope(step=name):  # the call log names the node that made each model call
                res = await fn(state, rt)
            record = TraceRecord(
                node=name,
                decision=res.decision,
                detail=parse_detail(name, res.detail, strict=True),
                latency_ms=round((time.perf_counter() - t0) * 1000, 3),
                tokens=res.tokens,
                cost=res.cost,
                cached=res.cached,
            )
            if sp is not None:
                set_attributes(sp, node_attributes(record))
        update = dict(res.update)
        update["trace"] = [record]
        update["steps"] = state.get("steps", 0) + 1
        update["model_calls"] = state.get("model_calls", 0) + res.model_calls
        return update

    node.__name__ = name
    return node


def _end_early(state: AgentState, rt: Runtime) -> str:
    """A turn cut short ends with the latest validated answer if there is one. Without one, a
    chat-model turn that has usable context gets one extractive draft first (milliseconds; still
    validated): a slow model that ran out of time or calls has not shown that the context cannot
    answer. The step budget is a loop guard and ends the turn at once."""
    if state.get("validated_answer"):
        return "finalize"
    untried = not state.get("extractive") or state.get("validation") == "fallback"  # flagged, not yet drafted
    slow = budget_exceeded(state, rt) in ("budget_time", "budget_model_calls")  # not the step guard
    if rt.chat is not None and state.get("kept") and untried and slow:
        return "generate"
    return "refuse"


def build_graph(rt: Runtime) -> StateGraph:
    cfg = rt.config.agent
    g: StateGraph = StateGraph(AgentState)
    for name, fn in NODES.items():
        g.add_node(name, cast(Any, _bind(name, fn, rt)))

    def no_context(state: AgentState) -> str:
        """Nothing usable: retry internally, then search outside, then refuse."""
        if cfg.rewrite and state.get("rewrites", 0) < cfg.budgets.max_rewrites:
            return "rewrite"
        if rt.search is not None and not state.get("external_tried"):
            return "external_search"
        return "refuse"

    def after_grade(state: AgentState) -> str:
        if budget_exceeded(state, rt):
            return _end_early(state, rt)
        if state.get("cycle", 0) > 0:
            return "refine"
        verdict = state.get("verdict")
        if verdict == "CORRECT":
            return "refine"
        if verdict == "AMBIGUOUS":
            return "external_search" if rt.search is not None and not state.get("external_tried") else "refine"
        return no_context(state)

    def after_rewrite(state: AgentState) -> str:
        if budget_exceeded(state, rt):
            return _end_early(state, rt)
        last = state["trace"][-1].detail if state.get("trace") else None
        if isinstance(last, RewriteDetail) and last.duplicate:
            return no_context(state)
        return "external_search" if isinstance(last, RewriteDetail) and last.purpose == "external" else "retrieve"

    def after_refine(state: AgentState) -> str:
        if budget_exceeded(state, rt):
            return _end_early(state, rt)
        if state.get("kept"):
            return "generate"
        return "finalize" if state.get("cycle", 0) > 0 and state.get("validation") == "ok" else no_context(state)

    def after_validate(state: AgentState) -> str:
        if budget_exceeded(state, rt):
            return _end_early(state, rt)
        status = state.get("validation")
        if status in ("retry", "fallback"):
            return "generate"
        if status in ("gate", "exhausted"):
            # a later cycle's draft failed: keep the answer an earlier cycle validated
            return "finalize" if state.get("validated_answer") else "refuse"
        return "critique" if cfg.critique else "finalize"

    def after_critique(state: AgentState) -> str:
        if state.get("termination_reason") or budget_exceeded(state, rt):
            return "finalize"
        return "retrieve"

    g.add_edge(START, "condense")
    g.add_edge("condense", "retrieve")
    g.add_edge("retrieve", "grade")
    g.add_conditional_edges("grade", after_grade, ["refine", "external_search", "rewrite", "refuse", "finalize"])
    g.add_conditional_edges("rewrite", after_rewrite, ["retrieve", "external_search", "rewrite", "refuse", "finalize"])
    g.add_edge("external_search", "grade")
    g.add_conditional_edges("refine", after_refine, ["generate", "rewrite", "external_search", "refuse", "finalize"])
    g.add_edge("generate", "validate_citations")
    g.add_conditional_edges("validate_citations", after_validate, ["generate", "critique", "finalize", "refuse"])
    g.add_conditional_edges("critique", after_critique, ["retrieve", "finalize"])
    g.add_edge("finalize", END)
    g.add_edge("refuse", END)
    return g
