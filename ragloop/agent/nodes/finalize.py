"""finalize and refuse: the only two ways a turn ends.

finalize commits the latest validated answer, keeps only the citations it uses, scores it and
tells the user, in plain words, what it could not resolve (and when external search failed).
refuse says the knowledge base does not hold the answer and names what was searched; it never
generates from ungrounded context.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage

from ragloop.agent.details import ExternalSearchDetail, FinalizeDetail, RefuseDetail
from ragloop.agent.nodes.critique import score_of
from ragloop.agent.nodes.validate import CITE
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.state import AgentState
from ragloop.agent.types import Deficiency


def residual_text(defs: list[Deficiency], floor: float) -> list[str]:
    out = []
    for d in defs:
        if d.status in ("open", "unresolvable") and d.severity >= floor:
            prefix = "Could not resolve" if d.status == "unresolvable" else "Not fully resolved"
            out.append(f"{prefix}: {d.description}")
    return out


def quality(state: AgentState, floor: float) -> float:
    grades = [c.grade for c in state.get("retrieved") or [] if c.grade is not None]
    open_defs = [
        d for d in state.get("deficiencies") or [] if d.status in ("open", "unresolvable") and d.severity >= floor
    ]
    return round(max(grades, default=0.0) * score_of(open_defs), 4)


CHECK_CHARS = 600
"""The most the answer check reads: the answer's lead, cut at a sentence end. Why: the reader's cost
grows with its prompt, and a long-form answer is many sentences of context after its claim. Measured
on MTRAG-UN (8-sentence answers, median 1,247 characters, 90th percentile 4,206), Qwen 1.5B took 17 s
a read on 2 busy cores, so the fit read 53 answers in a simulated week and never finished; capped, it
read 330 at 3.5 s. SQuAD 2.0 answers (median 245, at most 532 on 300 held-out answers) are read whole."""


def check_text(answer: str, limit: int = CHECK_CHARS) -> str:
    """What the answer check reads: the answer as shown, without its citation marks and notes, at most
    `limit` characters (the improvement loop's fit scores stored answers through this same function, so
    it sees what serving saw)."""
    text = " ".join(CITE.sub("", answer.split("\n\nNote: ", 1)[0]).split())
    if len(text) <= limit:
        return text
    head = text[: limit + 1]
    end = max(head.rfind(". "), head.rfind("? "), head.rfind("! "))
    return head[: end + 1] if end > 0 else head[:limit].rsplit(" ", 1)[0]


async def answer_check(state: AgentState, rt: Runtime, answer: str) -> float | None:
    """The answer check's P(the draft answers the question); None when the check is off (`tau_answer`
    0 or no scorer), so an unchecked pipeline pays nothing for it."""
    if rt.answer_check is None or rt.config.agent.tau_answer <= 0.0 or not answer:
        return None
    question = state.get("standalone") or state["question"]
    judged = await rt.answer_check.relevance(question, [check_text(answer)])
    return round(float(judged[0].p), 6)


async def finalize(state: AgentState, rt: Runtime) -> NodeResult:
    cfg = rt.config.agent
    validated = state.get("validated_answer")
    answer = (validated if validated is not None else state.get("pending_answer") or "").strip()
    sources = state.get("validated_citations") if validated is not None else state.get("pending_citations")
    used = {int(n) for n in CITE.findall(answer)}
    citations = [c for c in sources or [] if c.n in used]
    residuals = residual_text(state.get("deficiencies") or [], cfg.severity_floor)
    score = quality(state, cfg.severity_floor)
    reason = state.get("termination_reason")
    if not reason and state.get("validation") in ("gate", "exhausted"):
        reason = "plateau"  # the next cycle's draft did not hold up: the earlier answer is as good as it got
    reason = reason or ("validated" if not cfg.critique else "converged")
    checked = None if score < cfg.min_quality else await answer_check(state, rt, answer)
    if score < cfg.min_quality or (checked is not None and checked < cfg.tau_answer):
        why = "insufficient_evidence" if checked is None else "not_answered"
        refused = await refuse({**state, "termination_reason": why}, rt)
        return NodeResult(  # finalize's own record: the draft's quality and check score say why it was refused
            update=refused.update, decision=refused.decision, detail=FinalizeDetail(quality=score, answer_check=checked)
        )
    notes = list(residuals)
    failed = [
        r.detail.error
        for r in state.get("trace") or []
        if isinstance(r.detail, ExternalSearchDetail) and r.decision == "degraded"
    ]
    if failed:
        notes.append(f"External search failed ({failed[-1]}), so this answer uses the knowledge base only.")
    shown = answer
    if notes:  # notes are not citations: no [n] in them may look like one
        shown += "\n\nNote: " + " ".join(CITE.sub(r"(\1)", n) for n in notes)
    return NodeResult(
        update={
            "final_answer": shown,
            "citations": citations,
            "quality_score": score,
            "residual_deficiencies": residuals,
            "refused": False,
            "termination_reason": reason,
            "messages": [AIMessage(content=shown)],
        },
        decision=f"answered ({reason})",
        detail=FinalizeDetail(
            quality=score, citations=[c.chunk_id for c in citations], residuals=residuals, answer_check=checked
        ),
    )


async def refuse(state: AgentState, rt: Runtime) -> NodeResult:
    reason = state.get("termination_reason") or "no_grounded_context"
    if state.get("validation") in ("gate", "exhausted") and not state.get("termination_reason"):
        reason = "no_valid_citations"
    searched = list(dict.fromkeys(state.get("queries") or [state.get("standalone") or state["question"]]))
    where = f"the '{rt.collection_name}' knowledge base" if rt.collection_name else "the knowledge base"
    text = f"I couldn't find this in {where}. I searched for: " + "; ".join(f'"{q}"' for q in searched) + "."
    note = state.get("external_note")
    if note:
        text += f" External search: {note}."
    return NodeResult(
        update={
            "final_answer": text,
            "citations": [],
            "refused": True,
            "termination_reason": reason,
            "quality_score": 0.0,
            "residual_deficiencies": [],
            "messages": [AIMessage(content=text)],
        },
        decision=f"refused ({reason})",
        detail=RefuseDetail(searched=searched, verdict=state.get("verdict"), reason=state.get("verdict_reason", "")),
    )
