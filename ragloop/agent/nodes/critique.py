"""critique: one cycle of the stateful evaluation loop.

It returns typed deficiencies, not just a score. Ids are content hashes of type + affected
section, so a problem found again keeps its id and its attempt count; a previously open one
that is not found again is `addressed`; one that survives `max_attempts_per_deficiency`
targeted retrievals becomes `unresolvable` and is disclosed, while the loop goes on with the
rest. Offline it reads lexically: question aspects no cited sentence covers, the asked-for
kind of answer (a year, a number, a name) missing, and cited sources that disagree.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from pydantic import BaseModel, Field

from ragloop.agent.details import CritiqueDetail
from ragloop.agent.nodes.validate import strip_markers
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.state import AgentState
from ragloop.agent.types import CycleRecord, Deficiency, DeficiencyType
from ragloop.models.chat import ChatRequest
from ragloop.models.errors import ModelError
from ragloop.text.analysis import aspects, coverage, entities, numbers

_YEAR = re.compile(r"\b(1\d{3}|20\d{2})\b")
_TYPE_WORDS = {"year", "many", "much", "number", "date", "percent", "percentag", "centuri", "decad"}


def expected_kind(question: str) -> str | None:
    q = question.lower()
    if re.search(r"\b(what|which) (year|century|decade)\b|\bwhen\b", q):
        return "year"
    if re.search(r"\bhow (many|much|long|old|far|big|large)\b|\bwhat (percentage|number|amount)\b", q):
        return "number"
    if re.search(r"^\s*who\b|\bwho (was|is|were|are)\b", q):
        return "name"
    return None


def _has_kind(kind: str, text: str) -> bool:
    if kind == "year":
        return bool(_YEAR.search(text)) or bool(re.search(r"\bcentury\b", text.lower()))
    if kind == "number":
        return bool(numbers(text)) or bool(
            re.search(
                r"\b(one|two|three|four|five|six|seven|eight|nine|ten|hundred|thousand|million)\b",
                text.lower(),
            )
        )
    return bool(entities(text))


def offline_deficiencies(question: str, answer: str, cycle: int) -> list[Deficiency]:
    text = strip_markers(answer)
    found: list[Deficiency] = []
    kind = expected_kind(question)
    if kind and not _has_kind(kind, text):
        found.append(
            _deficiency(
                DeficiencyType.INSUFFICIENT_SPECIFICITY,
                f"asks for a {kind}",
                question,
                cycle,
                0.7,
                f"The question asks for a {kind}, and the answer does not state one.",
                f"{question} {kind}",
            )
        )
    asp = aspects(question)
    asp = replace(asp, terms=frozenset(t for t in asp.terms if t not in _TYPE_WORDS))
    _, missing = coverage(asp, text)
    for m in missing:
        heavy = m in asp.entities or m in asp.numbers
        if heavy:
            found.append(
                _deficiency(
                    DeficiencyType.MISSING_ASPECT,
                    m,
                    question,
                    cycle,
                    0.6,
                    f"The answer does not mention {m!r}, which the question asks about.",
                    f"{m} {question}",
                )
            )
    light = sorted(asp.word(m) for m in missing if m not in asp.entities and m not in asp.numbers)
    if asp.terms and len(light) / len(asp.terms) > 0.5:  # weak evidence: plain words are often paraphrased
        found.append(
            _deficiency(
                DeficiencyType.MISSING_ASPECT,
                "terms: " + " ".join(light),
                question,
                cycle,
                round(0.4 * len(light) / len(asp.terms), 3),
                "Most of the question's key terms are not covered by the answer: " + ", ".join(light),
                f"{' '.join(light)} {question}",
            )
        )
    if kind == "year":
        years = sorted(set(_YEAR.findall(text)))
        if len(years) > 1:
            found.append(
                _deficiency(
                    DeficiencyType.CONTRADICTORY_SOURCES,
                    "years " + " ".join(years),
                    question,
                    cycle,
                    0.4,
                    f"The cited sources give different years ({', '.join(years)}).",
                    f"{question} {' '.join(years)}",
                )
            )
    return found


def _deficiency(
    kind: DeficiencyType,
    section: str,
    question: str,
    cycle: int,
    severity: float,
    description: str,
    query: str,
) -> Deficiency:
    return Deficiency(
        id=Deficiency.make_id(kind, section),
        type=kind,
        description=description,
        affected_section=section,
        correction_query=query.strip() or question,
        severity=min(1.0, max(0.0, severity)),
        cycle_found=cycle,
    )


class _LLMDeficiency(BaseModel):
    type: DeficiencyType
    description: str
    affected_section: str
    suggested_correction_query: str
    severity: float = Field(ge=0.0, le=1.0)


class _LLMCritique(BaseModel):
    deficiencies: list[_LLMDeficiency]
    overall_score: float = Field(ge=0.0, le=1.0)


CRITIQUE_PROMPT = """You audit an answer against its question. List SPECIFIC deficiencies only (empty list if the
answer is correct and complete). Types: {types}. For each: type, description, affected_section (quote the
problem text or name the missing aspect), suggested_correction_query (a search query that would find the fix),
severity 0-1. Also give overall_score 0-1.
QUESTION: {question}
ANSWER: {answer}
PREVIOUSLY OPEN: {open}"""


async def _llm_deficiencies(state: AgentState, rt: Runtime, cycle: int) -> tuple[list[Deficiency], int]:
    open_ = [d.description for d in state.get("deficiencies") or [] if d.status == "open"]
    prompt = CRITIQUE_PROMPT.format(
        types=", ".join(t.value for t in DeficiencyType),
        question=state.get("standalone") or state["question"],
        answer=state.get("pending_answer") or "",
        open=open_,
    )
    resp = await rt.ask(ChatRequest.user(prompt, output_type=_LLMCritique, max_tokens=500))
    found = [
        _deficiency(
            d.type,
            d.affected_section,
            state["question"],
            cycle,
            d.severity,
            d.description,
            d.suggested_correction_query,
        )
        for d in resp.parsed.deficiencies
    ]
    return found, resp.usage.total_tokens


def score_of(open_defs: list[Deficiency]) -> float:
    return math.prod(1.0 - d.severity for d in open_defs)


async def critique(state: AgentState, rt: Runtime) -> NodeResult:
    cfg = rt.config.agent
    budgets = cfg.budgets
    cycle = state.get("cycle", 0) + 1
    question = state.get("standalone") or state["question"]
    tokens = calls = 0
    how = "offline"
    found = offline_deficiencies(question, state.get("pending_answer") or "", cycle)
    if rt.chat is not None:
        try:
            llm_found, tokens = await _llm_deficiencies(state, rt, cycle)
            found, calls, how = (
                llm_found + [d for d in found if d.type == DeficiencyType.INSUFFICIENT_SPECIFICITY],
                1,
                "llm",
            )
        except ModelError as exc:
            how = f"offline (llm failed: {type(exc).__name__})"
    previous = {d.id: d for d in state.get("deficiencies") or []}
    found_ids = {d.id for d in found}
    updates: list[Deficiency] = []
    resolved: list[str] = []
    for d in previous.values():
        # gone from the current answer: addressed, even if it had been given up on (not disclosed then)
        if d.status in ("open", "unresolvable") and d.id not in found_ids:
            updates.append(d.model_copy(update={"status": "addressed"}))
            resolved.append(d.id)
    for d in found:
        old = previous.get(d.id)
        if old is not None:
            status = "unresolvable" if old.attempts >= budgets.max_attempts_per_deficiency else old.status
            if old.status == "addressed":
                status = "open"  # it came back
            d = d.model_copy(update={"attempts": old.attempts, "cycle_found": old.cycle_found, "status": status})
        updates.append(d)
    current = {d.id: d for d in [*previous.values(), *updates]}
    open_now = [d for d in current.values() if d.status == "open" and d.severity >= cfg.severity_floor]
    disclosed = [
        d for d in current.values() if d.status in ("open", "unresolvable") and d.severity >= cfg.severity_floor
    ]
    score = score_of(disclosed)
    last = state.get("last_score", 0.0)
    streak = state.get("plateau_streak", 0) + 1 if cycle > 1 and score <= last + 1e-3 else 0
    stop: str | None = None
    if not open_now:
        stop = "converged"
    elif streak >= budgets.plateau_cycles:
        stop = "plateau"
    elif cycle >= budgets.max_cycles:
        stop = "max_cycles"
    if stop is None:  # another targeted retrieval for each open deficiency: count the attempt
        open_ids = {d.id for d in open_now}
        updates = [
            d.model_copy(update={"attempts": d.attempts + 1}) if d.id in open_ids else d for d in current.values()
        ]
    record = CycleRecord(
        cycle=cycle,
        found=sorted(found_ids),
        resolved=resolved,
        score=round(score, 4),
        queries=[d.correction_query for d in open_now] if stop is None else [],
    )
    return NodeResult(
        update={
            "cycle": cycle,
            "deficiencies": updates,
            "history": [record],
            "last_score": score,
            "plateau_streak": streak,
            "termination_reason": stop,
        },
        decision=stop or f"{len(open_now)} open deficiencies: targeted retrieval",
        detail=CritiqueDetail(
            how=how,
            score=round(score, 4),
            found=[(d.type.value, d.affected_section, d.severity) for d in found],
            resolved=resolved,
        ),
        tokens=tokens,
        model_calls=calls,
    )
