"""One diagnosis end to end: assess the served answer, run the oracle, classify.

`Diagnoser.inputs` gathers everything the tree reads into one serialisable `DiagnosisInput`
(store it with the evaluation); `classify` turns it into the `Diagnosis`. Keeping the two apart
is what makes a diagnosis replayable: the expensive, model-dependent part (retrievals, scorer
calls) is recorded once, the decision is recomputed from the record at will.

The answer is assessed with the harness's own metric pieces (`claims`, `chunk_relevance`,
`context_precision_from`, `SUPPORT_THRESHOLD` from `ragloop.evaluation.metrics.answer`), so
faithfulness and context precision mean here exactly what they mean in the evaluation reports;
the unfaithful claims come out of the same support calls as the ratio.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragloop.evaluation.metrics.answer import SUPPORT_THRESHOLD, chunk_relevance, claims, context_precision_from
from ragloop.improve.classifier import classify
from ragloop.improve.oracle import OracleRetriever, ranked_chunks
from ragloop.improve.types import AnswerAssessment, Diagnosis, DiagnosisInput, RankedChunk, Thresholds
from ragloop.models.scoring.base import Scorer
from ragloop.retrieval.types import Hit


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
    "question reference", as the harness does). A refusal has no claims: faithfulness None."""
    cs = [] if refused else claims(answer)
    faith: float | None = None
    unfaithful: tuple[str, ...] = ()
    if cs:
        if contexts:
            joined = "\n\n".join(contexts)
            judged = await judge.support(cs, [joined] * len(cs))
            ok = [j.p >= SUPPORT_THRESHOLD for j in judged]
        else:
            ok = [False] * len(cs)
        faith = sum(ok) / len(cs)
        unfaithful = tuple(c for c, good in zip(cs, ok, strict=True) if not good)
    query = f"{question} {reference}".strip() if reference else question
    cp = context_precision_from(await chunk_relevance(judge, query, list(contexts))) if contexts else None
    return AnswerAssessment(
        faithfulness=faith,
        context_precision=cp,
        unfaithful_claims=unfaithful,
        refused=refused,
        judge=judge.name,
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
