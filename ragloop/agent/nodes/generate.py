"""generate: an answer from the refined context only, with inline [n] citations.

LLM: sources fenced as data, a one-shot example of citing, the system prompt of the config's
`prompt_version`. Offline: an extractive composer that picks the best-supported strips, drops
near-duplicates and cites each sentence, under the same version's composer rules (relevance floor,
sentence cap: `ragloop.agent.prompts`). The result
is a *pending* answer: nothing is shown until validation passes.
"""

from __future__ import annotations

from ragloop.agent import prompts
from ragloop.agent.nodes.validate import sentence_key
from ragloop.agent.runtime import NodeResult, Runtime, budget_exceeded
from ragloop.agent.state import AgentState
from ragloop.agent.types import Citation, KeptStrip
from ragloop.models.chat import ChatRequest
from ragloop.models.errors import ModelError
from ragloop.text.analysis import content_terms
from ragloop.text.sentences import split_strips


def number_sources(state: AgentState) -> tuple[list[Citation], dict[int, str], dict[str, int]]:
    """Kept strips grouped by chunk, numbered in context order."""
    grades = {c.chunk_id: c for c in state.get("retrieved") or []}
    numbers: dict[str, int] = {}
    texts: dict[int, list[str]] = {}
    citations: list[Citation] = []
    for s in state.get("kept") or []:
        if s.chunk_id not in numbers:
            n = len(numbers) + 1
            numbers[s.chunk_id] = n
            chunk = grades.get(s.chunk_id)
            citations.append(
                Citation(
                    n=n,
                    chunk_id=s.chunk_id,
                    doc_id=s.doc_id,
                    title=chunk.title if chunk else "",
                    heading_path=chunk.heading_path if chunk else (),
                    score=round(chunk.grade or 0.0, 4) if chunk else 0.0,
                )
            )
            texts[n] = []
        texts[numbers[s.chunk_id]].append(s.text)
    joined = {n: " ".join(t) for n, t in texts.items()}
    citations = [c.model_copy(update={"excerpt": joined[c.n][:300]}) for c in citations]
    return citations, joined, numbers


def _similar(a: str, b: str) -> bool:
    ta, tb = content_terms(a), content_terms(b)
    return bool(ta and tb) and len(ta & tb) / len(ta | tb) >= 0.7


def compose(
    strips: list[KeptStrip], numbers: dict[str, int], max_sentences: int, avoid: set[str], floor_ratio: float = 0.3
) -> str:
    """Extractive answer: best strips first, near-duplicates and rejected strips left out."""
    ranked = sorted((s for s in strips if sentence_key(s.text) not in avoid), key=lambda s: -s.score)
    if not ranked:
        return ""
    floor = floor_ratio * ranked[0].score
    chosen: list[KeptStrip] = []
    for s in ranked:
        if len(chosen) >= max_sentences or s.score < floor:
            break
        if any(_similar(s.text, c.text) for c in chosen):
            continue
        chosen.append(s)
    parts = []
    for s in chosen:
        n = numbers[s.chunk_id]
        # a strip is one sentence after refinement, a whole chunk without it: cite every sentence
        pieces: list[tuple[str, str]] = [(p.text, p.kind) for p in split_strips(s.text)] if s.kind == "sentence" else []
        for raw, kind in pieces or [(s.text, s.kind)]:
            text = raw.strip()
            if kind == "code":
                parts.append(f"{text}\n[{n}]")
            elif sentence_key(text) not in avoid:
                body = text[:-1] if text[-1:] in ".!?" else text
                end = text[-1] if text[-1:] in ".!?" else "."
                parts.append(f"{body} [{n}]{end}")
    return " ".join(parts)


async def generate(state: AgentState, rt: Runtime) -> NodeResult:
    cfg = rt.config.agent
    question = state.get("standalone") or state["question"]
    citations, texts, numbers = number_sources(state)
    corrections = state.get("corrections") or []
    spent = budget_exceeded(state, rt) if rt.chat is not None else None
    variant = prompts.variant(cfg.prompt_version)
    if rt.chat is not None and not state.get("extractive") and not spent:
        req = ChatRequest.user(
            prompts.generate_user(question, prompts.sources_block(citations, texts), corrections),
            system=variant.system_prompt(variant.max_sentences(cfg.max_answer_sentences) + 2),
            max_tokens=400,
        )
        try:
            resp = await rt.ask(req)
            return NodeResult(
                update={"pending_answer": resp.text.strip(), "pending_citations": citations},
                decision=f"llm answer with {len(citations)} sources",
                detail={"sources": [c.chunk_id for c in citations], "corrections": corrections},
                tokens=resp.usage.total_tokens,
                model_calls=1,
                cached=resp.cached,
            )
        except ModelError as exc:
            failure = f"llm failed ({type(exc).__name__}); extractive fallback"
        else:  # pragma: no cover - returned above
            failure = ""
    elif spent:
        failure = f"extractive: {spent} spent before a validated answer"
    else:
        failure = "extractive fallback: the chat model's drafts failed validation" if state.get("extractive") else ""
    avoid = set(state.get("unsupported") or [])
    answer = compose(
        state.get("kept") or [],
        numbers,
        variant.max_sentences(cfg.max_answer_sentences),
        avoid,
        max(cfg.answer_floor, variant.rules.floor_ratio),
    )
    update: dict[str, object] = {"pending_answer": answer, "pending_citations": citations}
    if spent:
        update["extractive"] = True  # one extractive draft; if it fails too, the turn refuses
    return NodeResult(
        update=update,
        decision=failure or f"extractive answer from {len(citations)} sources",
        detail={"sources": [c.chunk_id for c in citations], "avoided": sorted(avoid)},
    )
