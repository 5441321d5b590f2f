"""One diagnosis end to end: assess the served answer, run the oracle, classify.

`Diagnoser.inputs` gathers everything the tree reads into one serialisable `DiagnosisInput`
(store it with the evaluation); `classify` turns it into the `Diagnosis`. Keeping the two apart
is what makes a diagnosis replayable: the expensive, model-dependent part (retrievals, scorer
calls) is recorded once, the decision is recomputed from the record at will.

The answer is assessed with the harness's own metric pieces (`claims`, `chunk_relevance`,
`context_precision_from`, `SUPPORT_THRESHOLD` from `ragloop.evaluation.metrics.answer`), so
faithfulness and context precision mean here exactly what they mean in the evaluation reports;
the unfaithful claims come out of the same support calls as the ratio. Whether the answer gives the
ideal answer is the harness's end-to-end rule too (`expected_answer_correct`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragloop.evaluation.metrics.answer import SUPPORT_THRESHOLD, chunk_relevance, claims, context_precision_from
from ragloop.evaluation.metrics.item import expected_answer_correct
from ragloop.improve.classifier import classify
from ragloop.improve.oracle import OracleRetriever, ranked_chunks
from ragloop.improve.types import AnswerAssessment, Diagnosis, DiagnosisInput, RankedChunk, Thresholds
from ragloop.models.scoring.base import Scorer
from ragloop.retrieval.types import Hit
from ragloop.text.analysis import numbers
from ragloop.text.tokenize import ENGLISH_STOPWORDS

_NAME = re.compile(r"(?<![\w'’-])[A-Z][\w'’-]*")
_WORD = re.compile(r"[\w'’-]+")
_COMMON_STARTS = frozenset(
    [
        "however",
        "although",
        "also",
        "after",
        "before",
        "during",
        "since",
        "because",
        "while",
        "many",
        "most",
        "some",
        "one",
        "yes",
        "no",
    ]
)


def ungrounded_names(claim: str, context: str) -> tuple[str, ...]:
    """The claim's capitalised words (stopwords and common sentence openers aside) and numbers
    that the context never mentions. Why: the lexical judge reads a claim with one name swapped
    ("Karakorum allows the Council to ...") as supported, since every other word matches; a
    name or number the context lacks is the commonest hallucination and needs no model."""
    words = {w.lower() for w in _WORD.findall(context)}
    words |= {w[:-1] for w in words if len(w) > 3 and w.endswith("s")}
    out: list[str] = []
    for m in _NAME.finditer(claim):
        w = m.group(0).strip("'’-")
        low = w.lower()
        if len(w) < 2 or low in ENGLISH_STOPWORDS or low in _COMMON_STARTS:
            continue
        if low not in words and low.removesuffix("s") not in words:
            out.append(w)
    out += sorted(numbers(claim) - numbers(context))
    return tuple(dict.fromkeys(out))


async def assess_answer(
    judge: Scorer,
    question: str,
    answer: str,
    contexts: Sequence[str],
    *,
    reference: str = "",
    refused: bool = False,
) -> AnswerAssessment:
    """Faithfulness (share of the answer's claims the joined context supports), the claims it
    does not support, and context precision of the ranked contexts (relevance judged against
    "question reference", as the harness does). A refusal has no claims: faithfulness None.
    Per claim it also records the judge's probability and the names and numbers the context
    lacks, so the tree can apply its own support threshold and grounding check on replay."""
    cs = [] if refused else claims(answer)
    faith: float | None = None
    unfaithful: tuple[str, ...] = ()
    ps: list[float] = []
    joined = "\n\n".join(contexts)
    if cs:
        ps = [float(j.p) for j in await judge.support(cs, [joined] * len(cs))] if contexts else [0.0] * len(cs)
        ok = [p >= SUPPORT_THRESHOLD for p in ps]
        faith = sum(ok) / len(cs)
        unfaithful = tuple(c for c, good in zip(cs, ok, strict=True) if not good)
    query = f"{question} {reference}".strip() if reference else question
    cp = context_precision_from(await chunk_relevance(judge, query, list(contexts))) if contexts else None
    gives = (
        None if refused or not reference.strip() else await expected_answer_correct(judge, answer, reference, question)
    )
    return AnswerAssessment(
        faithfulness=faith,
        context_precision=cp,
        unfaithful_claims=unfaithful,
        refused=refused,
        judge=judge.name,
        claims=tuple(cs),
        claim_support=tuple(round(p, 6) for p in ps),
        claim_ungrounded=tuple(ungrounded_names(c, joined) for c in cs),
        gives_ideal=gives,
    )


class Diagnoser:
    """The oracle, the answer judge and the tree's thresholds, put together."""

    def __init__(self, oracle: OracleRetriever, judge: Scorer, thresholds: Thresholds | None = None) -> None:
        self.oracle = oracle
        self.judge = judge
        self.thresholds = thresholds or Thresholds()

    async def inputs(
        self,
        question: str,
        ideal_answer: str,
        answer: str,
        retrieval: Sequence[Hit] | Sequence[RankedChunk],
        k: int,
        contexts: Sequence[str],
        *,
        refused: bool = False,
    ) -> DiagnosisInput:
        """`retrieval`: the served ranking (to rank 100 where available); `contexts`: the texts
        the answer was generated from, in rank order."""
        ranked = tuple(
            r if isinstance(r, RankedChunk) else ranked_chunks([r], self.thresholds.max_rank)[0]
            for r in retrieval
            if r.rank <= self.thresholds.max_rank
        )
        assessment = await assess_answer(
            self.judge, question, answer, contexts, reference=ideal_answer, refused=refused
        )
        oracle = await self.oracle.retrieve(question, ideal_answer)
        return DiagnosisInput(
            question=question, ideal_answer=ideal_answer, k=k, retrieval=ranked, oracle=oracle, assessment=assessment
        )

    async def diagnose(
        self,
        question: str,
        ideal_answer: str,
        answer: str,
        retrieval: Sequence[Hit] | Sequence[RankedChunk],
        k: int,
        contexts: Sequence[str],
        *,
        refused: bool = False,
    ) -> tuple[DiagnosisInput, Diagnosis]:
        inp = await self.inputs(question, ideal_answer, answer, retrieval, k, contexts, refused=refused)
        return inp, classify(inp, self.thresholds)
