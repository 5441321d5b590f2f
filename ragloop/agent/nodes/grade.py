"""grade: the CRAG retrieval evaluator.

Each chunk gets P(it answers the question) from the grading scorer, in one batched call.
CORRECT if any score >= tau_U, INCORRECT if all are < tau_L, else AMBIGUOUS; only chunks at or
above tau_L go forward to refinement. With `entity_grounding`, an AMBIGUOUS verdict on a
question naming something that no retrieved passage mentions (text, title or heading path)
becomes INCORRECT: lexically similar chunks about something else (`marshal` for "the Marshall
Plan") grade well enough to be answered from, and that is the common way an out-of-corpus
question gets a wrong answer. Only the names the user wrote in this turn count: condensation
carries earlier turns' names into the standalone question as context, and the passages for a
follow-up about something new rarely repeat them (on MTRAG dev that refused 23 answerable turns).
A CORRECT verdict stands: on SQuAD 2.0 overriding it too refused ~6% of answerable questions
(names paraphrased in the passage) for ~10% of unanswerable ones.
"""

from __future__ import annotations

from ragloop.agent.details import GradeDetail
from ragloop.agent.runtime import NodeResult, Runtime
from ragloop.agent.state import AgentState
from ragloop.agent.types import RetrievedChunk, Verdict
from ragloop.text.analysis import ungrounded_entities
from ragloop.text.pii import default_redactor


def verdict_for(scores: list[float], tau_upper: float, tau_lower: float) -> Verdict:
    if any(s >= tau_upper for s in scores):
        return "CORRECT"
    if not scores or all(s < tau_lower for s in scores):
        return "INCORRECT"
    return "AMBIGUOUS"


def usable(chunks: list[RetrievedChunk], tau_lower: float) -> list[RetrievedChunk]:
    return sorted((c for c in chunks if c.grade is not None and c.grade >= tau_lower), key=lambda c: -(c.grade or 0.0))


def _passage(c: RetrievedChunk) -> str:
    return " ".join([c.title, *c.heading_path, c.text])


async def grade(state: AgentState, rt: Runtime) -> NodeResult:
    cfg = rt.config.agent
    question = state.get("standalone") or state["question"]
    chunks = state.get("retrieved") or []
    todo = [c for c in chunks if c.grade is None]
    judged = await rt.grade_scorer.relevance(question, [c.text for c in todo]) if todo else []
    graded = [
        c.model_copy(update={"grade": float(j.p), "grade_evidence": j.evidence})
        for c, j in zip(todo, judged, strict=True)
    ]
    by_id = {c.chunk_id: c for c in chunks} | {c.chunk_id: c for c in graded}
    scores = [c.grade for c in by_id.values() if c.grade is not None]
    verdict = verdict_for(scores, cfg.tau_upper, cfg.tau_lower)
    best = max(scores, default=0.0)
    check = cfg.entity_grounding and verdict == "AMBIGUOUS"
    asked = default_redactor().remove(state["question"])  # an address is not a name the documents lack
    missing = ungrounded_entities(asked, [_passage(c) for c in by_id.values()]) if check else []
    if missing and verdict == "AMBIGUOUS":
        verdict = "INCORRECT"
        reason = f"no retrieved passage mentions {', '.join(repr(m) for m in missing)} (best chunk {best:.2f})"
    elif verdict == "CORRECT":
        reason = f"best chunk scores {best:.2f} >= tau_U {cfg.tau_upper}"
    elif verdict == "INCORRECT":
        reason = f"all {len(scores)} chunks score below tau_L {cfg.tau_lower} (best {best:.2f})"
    else:
        reason = f"best chunk {best:.2f} is between tau_L {cfg.tau_lower} and tau_U {cfg.tau_upper}"
    return NodeResult(
        update={"retrieved": graded, "verdict": verdict, "verdict_reason": reason},
        decision=verdict,
        detail=GradeDetail(
            reason=reason,
            scores={c.chunk_id: round(c.grade or 0.0, 4) for c in graded},
            kept=[] if missing else [c.chunk_id for c in usable(list(by_id.values()), cfg.tau_lower)],
            ungrounded_entities=missing,
            scorer=rt.grade_scorer.name,
        ),
    )
