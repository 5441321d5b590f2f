"""rewrite: a new query for a retry (internal) or for external search.

LLM: rewrite using the grader's reason and the queries already tried. Offline: the keyword core
of the question, then pseudo-relevance feedback (salient terms of the best chunks seen). A
rewrite that repeats an earlier query is not run: it still spends one rewrite of the budget.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import BaseModel, Field

from ragloop.agent.details import RewriteDetail
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.state import AgentState
from ragloop.models.chat import ChatRequest
from ragloop.models.errors import ModelError
from ragloop.text.analysis import content_terms
from ragloop.text.tokenize import Tokenizer

_PLAIN = Tokenizer(stemmer="none", stopwords=True)
_QUESTION_WORDS = {
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "when",
    "where",
    "why",
    "how",
    "does",
    "did",
    "do",
}


class RewrittenQuery(BaseModel):
    query: str = Field(description="the new search query")


def keyword_query(question: str) -> str:
    words = [w for w in _PLAIN.tokenize(question) if w not in _QUESTION_WORDS]
    seen: list[str] = []
    for w in words:
        if w not in seen:
            seen.append(w)
    return " ".join(seen)


def prf_terms(question: str, texts: list[str], n: int = 4) -> list[str]:
    """Terms frequent in the best chunks and absent from the question. Ties go to the term seen
    first (chunks in rank order, words in text order): never to set order, which changes with
    PYTHONHASHSEED and would make runs irreproducible across processes."""
    have = content_terms(question)
    counts: Counter[str] = Counter()
    for t in texts:
        for w in dict.fromkeys(_PLAIN.tokenize(t)):
            if len(w) > 3 and not w.isdigit() and not (content_terms(w) & have):
                counts[w] += 1
    return [w for w, c in counts.most_common(n) if c > 1 or len(texts) == 1]


def _norm(q: str) -> str:
    return " ".join(sorted(set(q.lower().split())))


async def _llm_rewrite(state: AgentState, rt: Runtime, purpose: str) -> tuple[str, int]:
    question = state.get("standalone") or state["question"]
    tried = state.get("queries") or []
    prompt = (
        f"Rewrite the search query so that a {'web search engine' if purpose == 'external' else 'document search'} "
        "finds passages that answer the question. Use precise keywords, names and identifiers.\n"
        f"Question: {question}\nQueries already tried: {tried}\n"
        f"Why the results were not good enough: {state.get('verdict_reason', '')}\n"
        "Return only the new query."
    )
    resp = await rt.ask(ChatRequest.user(prompt, output_type=RewrittenQuery, max_tokens=64))
    return str(resp.parsed.query).strip(), resp.usage.total_tokens


async def rewrite(state: AgentState, rt: Runtime) -> NodeResult:
    purpose: Literal["internal", "external"] = (
        "external"
        if state.get("verdict") == "INCORRECT" and rt.search and not state.get("external_tried")
        else "internal"
    )
    question = state.get("standalone") or state["question"]
    tried = state.get("queries") or []
    tokens, calls, how = 0, 0, "offline"
    query = ""
    if rt.chat is not None:
        try:
            query, tokens = await _llm_rewrite(state, rt, purpose)
            calls, how = 1, "llm"
        except ModelError as exc:
            how = f"offline (llm failed: {type(exc).__name__})"
    if not query:
        attempt = state.get("rewrites", 0)
        base = keyword_query(question)
        if attempt == 0 or purpose == "external":
            query = base
        else:
            best = sorted(state.get("retrieved") or [], key=lambda c: -(c.grade or 0.0))[:3]
            query = " ".join([base, *prf_terms(question, [c.text for c in best])])
    duplicate = any(_norm(query) == _norm(q) for q in [question, *tried])
    update: dict[str, object] = {"rewrites": state.get("rewrites", 0) + 1}
    if not duplicate:
        update["queries"] = [query]
    return NodeResult(
        update=update,
        decision=("duplicate rewrite, not retried" if duplicate else f"{how} rewrite for {purpose} search"),
        detail=RewriteDetail(query=query, purpose=purpose, duplicate=duplicate),
        tokens=tokens,
        model_calls=calls,
    )
