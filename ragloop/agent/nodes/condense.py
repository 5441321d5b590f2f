"""condense: a follow-up becomes a standalone question; long conversations get a rolling summary.

The summary is built only from completed exchanges: the current, unanswered question is never
given to the summariser (it would answer it instead of summarising). Earlier summary content is
kept and new exchanges are appended, so topics are not lost on the second or third pass.
Offline, a follow-up inherits the salient names and terms of the earlier turns.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage

from ragloop.agent.details import CondenseDetail
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.state import AgentState
from ragloop.models.chat import ChatRequest
from ragloop.models.errors import ModelError
from ragloop.text.analysis import content_terms, entities
from ragloop.text.pii import default_redactor

_FOLLOW_UP = {
    "it",
    "its",
    "they",
    "them",
    "their",
    "this",
    "that",
    "these",
    "those",
    "he",
    "she",
    "his",
    "her",
    "there",
    "then",
    "also",
    "what about",
    "and",
    "more",
}


def _text(m: AnyMessage) -> str:
    return m.content if isinstance(m.content, str) else str(m.content)


def is_follow_up(question: str) -> bool:
    words = question.lower().replace("?", " ").split()
    return (
        len(content_terms(question)) <= 2
        or bool(set(words) & _FOLLOW_UP)
        or question.lower().startswith(("what about", "and "))
    )


def carry_forward(question: str, earlier: list[str]) -> str:
    """Offline condensation: append the names and key terms of the latest earlier question(s)
    that the follow-up does not already contain."""
    have = content_terms(question)
    extra: list[str] = []
    for prev in reversed(earlier[-2:]):
        for e in sorted(entities(prev)):
            if not (content_terms(e) <= have) and e not in extra:
                extra.append(e)
        if extra:
            break
    if not extra and earlier:
        extra = [w for w in earlier[-1].rstrip("?").split() if content_terms(w) and not (content_terms(w) & have)][:6]
    return f"{question} ({' '.join(extra)})" if extra else question


async def _llm_condense(history: str, question: str, rt: Runtime) -> tuple[str, int]:
    prompt = (
        "Rewrite the last question so it can be understood without the conversation. Keep its meaning; "
        "do not answer it. Return only the question.\n\n"
        f"Conversation:\n{history}\n\nLast question: {question}"
    )
    resp = await rt.ask(ChatRequest.user(prompt, max_tokens=96))
    return resp.text.strip().splitlines()[0].strip() if resp.text.strip() else question, resp.usage.total_tokens


def usable_rewrite(candidate: str, question: str) -> bool:
    """A condensed question must still be a question, and still this one: end with "?" and keep
    at least half of the question's content terms. Small models given a long conversation often
    answer the question instead ("To migrate from Discovery v1 to v2, you ...") or swap in another
    ("What are the best neighborhoods to buy a house?" for a remark about savings accounts):
    either would be retrieved for, graded and answered as if the user had asked it."""
    have = content_terms(question)
    kept = content_terms(candidate) & have
    return candidate.rstrip().endswith("?") and (not have or len(kept) >= 0.5 * len(have))


async def _llm_summary(previous: str, exchanges: str, rt: Runtime) -> tuple[str, int]:
    prompt = (
        "Update the running summary of a conversation. Keep ALL content of the existing summary verbatim, then "
        "append the new exchanges as short Q/A points. Do not answer anything.\n\n"
        f"Existing summary:\n{previous or '(none)'}\n\nNew exchanges:\n{exchanges}"
    )
    resp = await rt.ask(ChatRequest.user(prompt, max_tokens=400))
    return resp.text.strip(), resp.usage.total_tokens


def _offline_summary(previous: str, pairs: list[tuple[str, str]]) -> str:
    lines = [previous] if previous else []
    for q, a in pairs:
        first = a.split("\n")[0][:200]
        lines.append(f"Q: {q} A: {first}")
    return "\n".join(lines)


async def condense(state: AgentState, rt: Runtime) -> NodeResult:
    cfg = rt.config.agent
    messages = state.get("messages") or []
    question = state["question"]
    earlier = messages[:-1]  # the last message is the current question
    earlier_questions = [_text(m) for m in earlier if isinstance(m, HumanMessage)]
    summary = state.get("summary", "")
    tokens = calls = 0
    update: dict[str, object] = {}
    standalone = question
    how = "first turn"
    if earlier_questions or summary:
        if rt.chat is not None:
            history = (summary + "\n" if summary else "") + "\n".join(
                f"{'User' if isinstance(m, HumanMessage) else 'Assistant'}: {_text(m)[:500]}" for m in earlier[-6:]
            )
            try:
                candidate, t = await _llm_condense(history, question, rt)
                tokens, calls = tokens + t, calls + 1
                if usable_rewrite(candidate, question):
                    standalone, how = candidate, "llm"
                else:
                    how = f"offline (llm rewrite rejected: {candidate[:80]!r})"
            except ModelError as exc:
                how = f"offline (llm failed: {type(exc).__name__})"
        if how != "llm":
            standalone = carry_forward(question, earlier_questions) if is_follow_up(question) else question
            label = "offline carry-forward" if standalone != question else "standalone already"
            how = label if how == "first turn" else f"{how}; {label}"
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    if len(humans) >= cfg.summarize_after:
        keep_from = len(earlier) - 2 * cfg.keep_exchanges
        old = earlier[: max(0, keep_from)]
        pairs = [
            (_text(q), _text(a))
            for q, a in zip(old[::2], old[1::2], strict=False)
            if isinstance(q, HumanMessage) and isinstance(a, AIMessage)
        ]
        if old:
            new_summary = ""
            if rt.chat is not None:
                try:
                    new_summary, t = await _llm_summary(summary, "\n".join(f"Q: {q}\nA: {a}" for q, a in pairs), rt)
                    tokens, calls = tokens + t, calls + 1
                except ModelError:
                    new_summary = ""
            update["summary"] = new_summary or _offline_summary(summary, pairs)
            update["messages"] = [RemoveMessage(id=m.id) for m in old if m.id]
    # personal data is never what the knowledge base is asked about: retrieval, grading and the draft
    # read the standalone question without it (the turn's messages keep the user's own words)
    stripped = default_redactor().remove(standalone)
    if stripped != standalone and stripped:
        standalone, how = stripped, f"{how}; personal data left out of the search"
    update["standalone"] = standalone
    return NodeResult(
        update,
        decision=how,
        detail=CondenseDetail(standalone=standalone, summarised="summary" in update),
        tokens=tokens,
        model_calls=calls,
    )
