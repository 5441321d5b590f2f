"""Answers, feedback and evaluations: `GET /v1/answers/{id}`, `POST /v1/answers/{id}/feedback`,
`GET /v1/evaluations/{answer_id}` (the tier evaluations and the failure diagnosis), and for admins
`GET /v1/answers/{id}/model-calls` (the call log's rows for the answer)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path, status

from ragloop.improve.engine import request_diagnosis
from ragloop.improve.payload import StoredTrace
from ragloop.improve.routing import route_feedback
from ragloop.service.answering import public_session
from ragloop.service.deps import AdminDep, CallerDep, ServiceDep
from ragloop.service.routes._common import ID_PATTERN, answer_citations, evaluation_public, owned_answer
from ragloop.service.routes.improve import diagnosis_public
from ragloop.service.schemas import (
    AnswerPublic,
    CitationPublic,
    EvaluationJobPublic,
    EvaluationsPublic,
    FeedbackCreate,
    FeedbackPublic,
    ModelCallPublic,
    ModelCallsPublic,
)
from ragloop.store import feedback_weight
from ragloop.store.vocabulary import EVALUATION_TIERS, Tier

router = APIRouter(tags=["answers"])
AnswerId = Annotated[str, Path(pattern=ID_PATTERN, description="The `answer_id` of a `/v1/query` response.")]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such answer (or not yours)."}}


@router.get(
    "/v1/answers/{answer_id}", response_model=AnswerPublic, responses=NOT_FOUND, summary="An answer with its trace"
)
async def get_answer(answer_id: AnswerId, svc: ServiceDep, caller: CallerDep) -> AnswerPublic:
    answer, query = await owned_answer(svc, caller, answer_id)
    trace = StoredTrace.load(answer.trace)
    return AnswerPublic(
        answer_id=answer.answer_id,
        session_id=public_session(caller, answer.session_id),
        question=query.question_text,
        answer=answer.answer_text,
        citations=[CitationPublic.model_validate(c) for c in answer_citations(answer)],
        confidence=float(answer.confidence or 0.0),
        refused=answer.refused,
        termination_reason=answer.termination_reason or "",
        residual_deficiencies=[str(d) for d in answer.residual_deficiencies or []],
        latency_ms=int(answer.latency_ms or 0),
        pipeline_version=answer.pipeline_version,
        degraded=trace.degraded,
        created_at=answer.created_at,
        trace=trace,
    )


@router.get(
    "/v1/answers/{answer_id}/model-calls",
    response_model=ModelCallsPublic,
    responses=NOT_FOUND,
    summary="An answer's model calls (admin)",
)
async def get_model_calls(answer_id: AnswerId, svc: ServiceDep, caller: AdminDep) -> ModelCallsPublic:
    """Every model call made for the answer, oldest first: its answer graph's (each with the node that
    made it), its tier-2 judge's and its diagnosis's, with tokens, latency and cost."""
    await owned_answer(svc, caller, answer_id)
    rows = await asyncio.to_thread(svc.store.model_calls.for_answer, answer_id)
    calls = [ModelCallPublic.model_validate(r) for r in rows]
    paid = [c for c in calls if not c.cached]
    priced = [c.cost_usd for c in calls if c.cost_usd is not None]
    return ModelCallsPublic(
        answer_id=answer_id,
        calls=calls,
        prompt_tokens=sum(c.prompt_tokens for c in paid),
        completion_tokens=sum(c.completion_tokens for c in paid),
        cost_usd=round(sum(priced), 8) if priced else None,
    )


@router.post(
    "/v1/answers/{answer_id}/feedback",
    response_model=FeedbackPublic,
    status_code=status.HTTP_201_CREATED,
    responses=NOT_FOUND,
    summary="Rate an answer",
)
async def post_feedback(
    answer_id: AnswerId, body: FeedbackCreate, svc: ServiceDep, caller: CallerDep
) -> FeedbackPublic:
    """Negative feedback sends the answer to the tier-2 judge and to failure diagnosis; a correction
    (the ideal answer the diagnosis reads) does too, and it or highlighted passages also send the answer
    to human review (tier 3). The feedback and its jobs are written in one transaction; its text (the
    correction, the highlighted passages) is stored redacted (`ragloop.text.pii`)."""
    await owned_answer(svc, caller, answer_id)
    body = svc.redactor.redact_deep(body)
    detailed = bool(body.corrected_answer or body.highlighted_passages)
    passages = [p.model_dump() for p in body.highlighted_passages]
    store = svc.store

    def write() -> tuple[str, bool, float]:
        with store.db.transaction():
            row = store.feedback.add(
                answer_id,
                body.rating,
                issues=list(body.issues),
                corrected_answer=body.corrected_answer,
                relevant_doc_ids=list(body.relevant_doc_ids),
                highlighted_passages=passages,
                user_id=caller.key_id,
                weight=feedback_weight(
                    corrected_answer=body.corrected_answer,
                    relevant_doc_ids=body.relevant_doc_ids,
                    highlighted_passages=passages,
                ),
            )
            queued = route_feedback(
                store.queue,
                answer_id,
                negative=body.rating == "negative",
                detailed=detailed,
                feedback_id=row.feedback_id,
            )
            reasons = ["negative_feedback"] * (body.rating == "negative") + ["correction"] * bool(body.corrected_answer)
            if reasons:
                request_diagnosis(store, answer_id, reasons)
                queued = True
            return row.feedback_id, queued, row.weight

    feedback_id, queued, weight = await asyncio.to_thread(write)
    if queued and svc.worker is not None:
        svc.worker.notify()
    return FeedbackPublic(feedback_id=feedback_id, improvement_queued=queued, weight=weight)


@router.get(
    "/v1/evaluations/{answer_id}",
    response_model=EvaluationsPublic,
    responses=NOT_FOUND,
    summary="An answer's evaluations",
)
async def get_evaluations(answer_id: AnswerId, svc: ServiceDep, caller: CallerDep) -> EvaluationsPublic:
    await owned_answer(svc, caller, answer_id)

    def load() -> EvaluationsPublic:
        rows = [evaluation_public(r) for r in svc.store.evaluations.for_answer(answer_id)]
        jobs = [
            EvaluationJobPublic.model_validate(j, from_attributes=True) for j in svc.store.queue.for_answer(answer_id)
        ]
        done = [r for r in rows if r.status == "completed"]
        best = max(done, key=lambda r: (EVALUATION_TIERS.index(r.evaluation_tier), r.evaluated_at), default=None)
        tier1 = next((r for r in reversed(done) if r.evaluation_tier == Tier.HEURISTIC), None)
        row = svc.store.diagnoses.get(answer_id)
        diagnosis = diagnosis_public(svc.store, row) if row is not None else None
        # a reviewer's label outranks the classifier; the classifier outranks machine tiers, which name no mode
        labelled = best is not None and best.evaluation_tier == Tier.HUMAN and best.failure_mode is not None
        mode: str | None
        if diagnosis is not None and diagnosis.failure_mode is not None and not labelled:
            mode, evidence, actions = diagnosis.failure_mode, diagnosis.failure_evidence, diagnosis.improvement_actions
        else:
            mode = best.failure_mode if best else None
            evidence = best.failure_evidence if best else {}
            actions = best.improvement_actions if best else []
        return EvaluationsPublic(
            answer_id=answer_id,
            evaluation_tier=best.evaluation_tier if best else None,
            scores=best.scores if best else {},
            heuristic_score=tier1.heuristic_score if tier1 else None,
            failure_mode=mode,
            failure_evidence=evidence,
            improvement_actions=list(actions),
            evaluations=rows,
            jobs=jobs,
            diagnosis=diagnosis,
        )

    return await asyncio.to_thread(load)
