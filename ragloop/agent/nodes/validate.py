"""validate_citations: the hallucination gate, then sentence-level checks.

Gate: an answer with no valid citation id is never shown (no-information response). Then each
sentence must carry a citation, and each cited chunk must support its sentence (support
scorer, one batched call, against the prompt variant's support threshold: `SUPPORT_THRESHOLD`
for v1). Problems go back to `generate` as explicit corrections, at most
`max_citation_retries` times; corrections live for this turn only. When retries run out the
unsupported sentences are cut, and if nothing supported is left the graph refuses (or, in a later
critique cycle, keeps the answer an earlier cycle validated). Before refusing, a chat model's
failed drafts give way once to the offline extractive composer (`fallback`): when the context
graded relevant, a small model that cannot cite is no reason to refuse an answerable question,
and the extracted sentences go through this same validation. A draft that passes is recorded as
`validated_answer`: the only text a turn may end with.
"""

from __future__ import annotations

import re

from ragloop.agent.details import ValidateDetail
from ragloop.agent.prompts import ComposerRules, variant
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.state import AgentState
from ragloop.text.sentences import split_strips

CITE = re.compile(r"\[(\d+)\]")
TRAILING = re.compile(r"\s*([.!?])\s*((?:\[\d+\]\s*)+)")
SPACE_BEFORE_STOP = re.compile(r"\s+([.!?,;:])")
MIN_CLAIM_CHARS = 20
SUPPORT_THRESHOLD = ComposerRules().support_threshold


def strip_markers(sentence: str) -> str:
    """The sentence without its [n] markers (and without the space a marker leaves before the stop)."""
    return SPACE_BEFORE_STOP.sub(r"\1", " ".join(CITE.sub("", sentence).split())).strip()


def sentence_key(text: str) -> str:
    """Comparable form of a sentence with or without its citation markers."""
    return strip_markers(text).rstrip(".!?").strip().lower()


def answer_sentences(answer: str) -> list[str]:
    """Sentences with their citations; `fact. [2]` is read as `fact [2].` so a trailing marker
    stays with the sentence it follows instead of the next one."""
    normalised = TRAILING.sub(lambda m: f" {m.group(2)}{m.group(1)}", answer)
    return [s.text.strip() for s in split_strips(normalised)]


def _can_fall_back(state: AgentState, rt: Runtime) -> bool:
    return rt.chat is not None and not state.get("extractive") and not state.get("validated_answer")


def _fallback(why: str, detail: ValidateDetail | None = None) -> NodeResult:
    return NodeResult(
        update={"validation": "fallback", "extractive": True, "corrections": []},
        decision=f"{why}: extractive fallback",
        detail=detail or ValidateDetail(),
    )


async def validate_citations(state: AgentState, rt: Runtime) -> NodeResult:
    cfg = rt.config.agent
    if not cfg.validate_citations:  # ablation: whatever was generated goes forward
        return NodeResult(
            {
                "validation": "ok",
                "validated_answer": state.get("pending_answer") or "",
                "validated_citations": state.get("pending_citations") or [],
            },
            "citation validation off",
        )
    answer = state.get("pending_answer") or ""
    citations = {c.n: c for c in state.get("pending_citations") or []}
    chunks = {c.chunk_id: c for c in state.get("retrieved") or []}
    retries = state.get("citation_retries", 0)
    sentences = answer_sentences(answer)
    cited = [(s, [int(n) for n in CITE.findall(s)]) for s in sentences]
    if not any(n in citations for _, ns in cited for n in ns):
        status = "retry" if retries < cfg.budgets.max_citation_retries and rt.chat is not None else "gate"
        if status == "gate" and _can_fall_back(state, rt):
            return _fallback("hallucination gate: no valid citation")
        fixes = ["Cite the sources: end every sentence with [n] for a source number that exists."]
        fixes += [f"Source [{n}] does not exist." for n in sorted({n for _, ns in cited for n in ns})]
        return NodeResult(
            update={
                "corrections": fixes,
                "citation_retries": retries + (status == "retry"),
                "validation": status,
            },
            decision=f"hallucination gate: no valid citation ({status})",
            detail=ValidateDetail(answer=answer[:500]),
        )
    uncited = [
        s for s, ns in cited if not [n for n in ns if n in citations] and len(strip_markers(s)) >= MIN_CLAIM_CHARS
    ]
    pairs = [(s, n) for s, ns in cited for n in ns if n in citations]
    judged = (
        await rt.support_scorer.support(
            [strip_markers(s) for s, _ in pairs], [chunks[citations[n].chunk_id].text for _, n in pairs]
        )
        if pairs
        else []
    )
    support: dict[str, float] = {}
    for (s, _), j in zip(pairs, judged, strict=True):
        support[s] = max(support.get(s, 0.0), float(j.p))
    threshold = variant(cfg.prompt_version).rules.support_threshold
    unsupported = [s for s, p in support.items() if p < threshold]
    bad_ids = sorted({n for _, ns in cited for n in ns if n not in citations})
    problems = [f"Add a citation to: {strip_markers(s)!r}" for s in uncited]
    problems += [
        f"The cited source does not support: {strip_markers(s)!r}; cite a source that does, or drop it."
        for s in unsupported
    ]
    problems += [f"Source [{n}] does not exist." for n in bad_ids]
    detail = ValidateDetail(
        support={strip_markers(s)[:80]: round(p, 3) for s, p in support.items()},
        uncited=len(uncited),
        invalid_ids=bad_ids,
        scorer=rt.support_scorer.name,
    )
    if not problems:
        return NodeResult(
            {
                "validation": "ok",
                "unsupported": [],
                "corrections": [],
                "validated_answer": answer,
                "validated_citations": list(citations.values()),
            },
            "all sentences cited and supported",
            detail,
        )
    flagged = [sentence_key(s) for s in [*uncited, *unsupported]]
    if retries < cfg.budgets.max_citation_retries:
        return NodeResult(
            update={
                "corrections": problems,
                "citation_retries": retries + 1,
                "validation": "retry",
                "unsupported": [*(state.get("unsupported") or []), *flagged],
            },
            decision=f"{len(problems)} problems: regenerate ({retries + 1}/{cfg.budgets.max_citation_retries})",
            detail=detail,
        )
    keep = [
        # a kept sentence loses the markers of sources that do not exist
        CITE.sub(lambda m: m.group(0) if int(m.group(1)) in citations else "", s)
        for s, ns in cited
        if s not in uncited and s not in unsupported and [n for n in ns if n in citations]
    ]
    if not keep and _can_fall_back(state, rt):
        return _fallback(f"retries spent: all {len(sentences)} sentences cut", detail)
    status = "ok" if keep else "exhausted"
    update: dict[str, object] = {
        "pending_answer": " ".join(keep),
        "validation": status,
        "unsupported": flagged,
        "corrections": [],
    }
    if keep:
        update |= {"validated_answer": " ".join(keep), "validated_citations": list(citations.values())}
    return NodeResult(
        update=update,
        decision=f"retries spent: cut {len(sentences) - len(keep)} sentences" + ("" if keep else ", nothing left"),
        detail=detail,
    )
