"""The golden set's review queue (admin): pending candidates, approve (optionally with the
reviewer's own expected answer), reject; a nomination pass now; coverage of production queries;
adversarial candidates at the coverage gaps.

A reviewer's views are `GoldenCandidatePublic`: question and proposed answer, never the machine's
scores or the production answer they came from (`ragloop.experiments.golden_review`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from ragloop.experiments import golden_review as review
from ragloop.experiments.golden_adversarial import generate, make_generator_chat
from ragloop.experiments.golden_coverage import collection_embedder, coverage
from ragloop.models.chat.base import run_sync
from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.golden_schemas import (
    CoveragePublic,
    GeneratePublic,
    GoldenApprove,
    GoldenCandidatePublic,
    GoldenDecisionPublic,
    GoldenGenerate,
    GoldenReject,
    GoldenReviewQueuePublic,
    NominationPublic,
)
from ragloop.service.schemas import COLLECTION_PATTERN
from ragloop.service.state import ServiceState
from ragloop.store import NotFoundError, StoreConflictError
from ragloop.store.vocabulary import CandidateStatus

router = APIRouter(tags=["golden"])
ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "No (valid) key."}, 403: {"description": "Not admin."}}
DECIDE: dict[int | str, dict[str, Any]] = ERRORS | {
    404: {"description": "No such candidate."},
    409: {"description": "Already decided."},
    422: {"description": "Nothing to approve as the expected answer."},
}


@router.get("/v1/golden/review", responses=ERRORS, summary="The golden review queue (admin)")
def review_queue(
    svc: ServiceDep,
    _admin: AdminDep,
    status: Literal["pending", "approved", "rejected"] = "pending",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> GoldenReviewQueuePublic:
    rows = svc.store.golden_candidates.by_status(status=status, limit=limit, offset=offset)
    return GoldenReviewQueuePublic(
        pending=svc.store.golden_candidates.count(CandidateStatus.PENDING),
        candidates=[GoldenCandidatePublic(**review.review_json(r)) for r in rows],
    )


def _decided(fn: Any) -> GoldenDecisionPublic:
    try:
        return GoldenDecisionPublic.model_validate(fn())
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    except StoreConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    except review.ReviewError as exc:
        raise HTTPException(422, str(exc)) from None


@router.post("/v1/golden/review/{candidate_id}/approve", responses=DECIDE, summary="Approve a candidate (admin)")
def approve_candidate(candidate_id: str, body: GoldenApprove, svc: ServiceDep, admin: AdminDep) -> GoldenDecisionPublic:
    """Inserts the golden entry (one new version), approved by this key. `expected_answer` is the
    reviewer's answer; omitted, the reviewer confirms the proposed answer as read."""
    return _decided(
        lambda: review.approve(
            svc.store,
            candidate_id,
            reviewer=f"key:{admin.key_id}",
            expected_answer=body.expected_answer,
            question=body.question,
            note=body.note,
        )
    )


@router.post("/v1/golden/review/{candidate_id}/reject", responses=DECIDE, summary="Reject a candidate (admin)")
def reject_candidate(candidate_id: str, body: GoldenReject, svc: ServiceDep, admin: AdminDep) -> GoldenDecisionPublic:
    return _decided(lambda: review.reject(svc.store, candidate_id, reviewer=f"key:{admin.key_id}", note=body.note))


@router.post("/v1/golden/nominate", responses=ERRORS, summary="Run a nomination pass now (admin)")
def nominate_now(svc: ServiceDep, admin: AdminDep) -> NominationPublic:
    """The nightly rule (heuristic > 0.92, judge > 0.90, >= 3 positive ratings, no negative
    feedback) over the last week's answers; what it finds waits in the review queue."""
    return NominationPublic.model_validate(review.nominate(svc.store, actor=f"key:{admin.key_id}").to_json())


def _coverage(svc: ServiceState, collection: str | None, radius: float | None, days: float) -> Any:
    name = collection or svc.config.collection
    try:
        embedder = collection_embedder(svc.settings, name)
    except LookupError as exc:
        raise HTTPException(409, str(exc)) from None
    r = radius if radius is not None else svc.config.golden_coverage_radius
    return coverage(svc.store, embedder, collection=name, radius=r, days=days)


@router.get(
    "/v1/golden/coverage",
    responses=ERRORS | {409: {"description": "The collection has no index."}},
    summary="Coverage of recent production queries (admin)",
)
def golden_coverage(
    svc: ServiceDep,
    _admin: AdminDep,
    days: Annotated[float, Query(gt=0, le=365)] = 7.0,
    radius: Annotated[float | None, Query(gt=0, le=1)] = None,
    collection: Annotated[str | None, Query(pattern=COLLECTION_PATTERN, max_length=64)] = None,
) -> CoveragePublic:
    """The share of the last `days` of queries whose nearest golden question is within `radius`
    (cosine, the collection's embedder), with n and a Wilson 95% interval, and the uncovered clusters."""
    return CoveragePublic.model_validate(_coverage(svc, collection, radius, days).to_json())


@router.post(
    "/v1/golden/generate",
    responses=ERRORS | {409: {"description": "The collection has no index, or no chat model for `chat`."}},
    summary="Adversarial candidates at the coverage gaps (admin)",
)
def golden_generate(body: GoldenGenerate, svc: ServiceDep, _admin: AdminDep) -> GeneratePublic:
    """Multi-document, misleading, negation and near-miss-entity questions seeded by the uncovered
    clusters; written by the current pipeline's chat model when it has one (and `generator` allows),
    by offline templates otherwise. They go to the review queue, never straight into the set."""
    report = _coverage(svc, body.collection, body.radius, body.days)
    _version, config = svc.agents.active()
    try:
        chat = make_generator_chat(svc.settings, config.agent.chat_model, body.generator, calls=svc.store.model_calls)
    except LookupError as exc:
        raise HTTPException(409, str(exc)) from None
    try:
        result, rows = run_sync(generate(svc.store, report, chat=chat, limit=body.max_candidates))
    finally:
        if chat is not None:
            run_sync(chat.aclose())
    return GeneratePublic(
        generator=result.generator,
        proposed=len(result.proposals),
        already_proposed=len(result.proposals) - len(rows),
        candidates=[GoldenCandidatePublic(**review.review_json(r)) for r in rows],
        coverage=CoveragePublic.model_validate(report.to_json()),
    )
