"""Tier 3, the human review queue (admin): list what waits for review, submit scores and labels."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status

from ragloop.improve.engine import request_diagnosis
from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.routes._common import ID_PATTERN, answer_citations, evaluation_public
from ragloop.service.schemas import CitationPublic, EvaluationPublic, ReviewCreate, ReviewItemPublic
from ragloop.store import Answer
from ragloop.store.vocabulary import Tier

router = APIRouter(tags=["review"])


@router.get("/v1/review", response_model=list[ReviewItemPublic], summary="Answers waiting for human review (admin)")
def review_queue(
    svc: ServiceDep, _admin: AdminDep, limit: Annotated[int, Query(ge=1, le=200)] = 50
) -> list[ReviewItemPublic]:
    """Oldest first: the 0.1% random sample, tier-1/tier-2 disagreements and detailed user feedback."""
    store = svc.store
    jobs = store.queue.listed(Tier.HUMAN, limit=limit)
    answers = store.queries.answers_with_questions([j.answer_id for j in jobs])
    items = []
    for job in jobs:
        if job.answer_id not in answers:
            continue
        answer, question = answers[job.answer_id]
        items.append(
            ReviewItemPublic(
                job_id=job.job_id,
                answer_id=answer.answer_id,
                reasons=[str(r) for r in (job.payload or {}).get("reasons", [])],
                queued_at=job.created_at,
                question=question,
                answer=answer.answer_text,
                citations=[CitationPublic.model_validate(c) for c in answer_citations(answer)],
                evaluations=[evaluation_public(e) for e in store.evaluations.for_answer(answer.answer_id)],
            )
        )
    return items


@router.post(
    "/v1/review/{answer_id}",
    response_model=EvaluationPublic,
    status_code=status.HTTP_201_CREATED,
    responses={404: {"description": "No such answer."}},
    summary="Submit a human evaluation (admin)",
)
def submit_review(
    answer_id: Annotated[str, Path(pattern=ID_PATTERN)], body: ReviewCreate, svc: ServiceDep, admin: AdminDep
) -> EvaluationPublic:
    """Records a `human` evaluation and closes the answer's review job, if one waits, in one transaction.
    The reviewer's correction and notes are stored redacted (`ragloop.text.pii`)."""
    store = svc.store
    body = svc.redactor.redact_deep(body)
    with store.db.transaction() as s:
        if s.get(Answer, answer_id) is None:
            raise HTTPException(404, f"no answer {answer_id!r}")
        scores: dict[str, float | None] = {str(k): v for k, v in body.scores.items()}
        row = store.evaluations.add(
            answer_id,
            Tier.HUMAN,
            scores=scores,
            failure_mode=body.failure_mode,
            failure_evidence={
                "labels": body.labels,
                "corrected_answer": body.corrected_answer,
                "notes": body.notes,
                "reviewer": f"key:{admin.key_id}",
            },
            evaluator_model=f"human:key:{admin.key_id}",
        )
        store.queue.settle(answer_id, Tier.HUMAN)
        if body.corrected_answer and body.corrected_answer.strip():
            # a reviewer's correction is an ideal answer: diagnose against it (reopens a skipped diagnosis)
            request_diagnosis(store, answer_id, ["review_correction"])
        return evaluation_public(row)
