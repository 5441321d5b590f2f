"""The improvement loop's admin API: the knowledge-gap log and the improvement actions.

`GET /v1/knowledge-gaps`, `GET /v1/knowledge-gaps/{gap_id}`, `GET /v1/improvements`,
`GET /v1/improvements/{action_id}`, `POST /v1/improvements/{action_id}/revert`; all admin-only
(a user key gets 403): they show every user's questions and change what serves everyone. An answer's
own diagnosis is on `GET /v1/evaluations/{answer_id}` (`diagnosis_public`).

The revert is the remediation's own (`ragloop.improve.remediate.revert_action`: it undoes the change,
marks the action reverted and writes the audit entry with the admin as actor); an action that is not
applied, or whose kind no remediation reverts, answers 409 rather than be marked reverted when nothing
was undone.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query

from ragloop.improve.remediate import revert_action
from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.improve_schemas import (
    DiagnosisPublic,
    ImprovementActionPublic,
    ImprovementsPublic,
    KnowledgeGapPublic,
    KnowledgeGapsPublic,
)
from ragloop.service.routes._common import ID_PATTERN
from ragloop.store import DiagnosisRecord, NotFoundError, Store, StoreConflictError
from ragloop.store.improve_models import ACTION_STATUSES, KNOWLEDGE_GAP_STATUSES

router = APIRouter(tags=["improvements"])
Id = Annotated[str, Path(pattern=ID_PATTERN)]
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=100_000)]
Name = Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
REVERTIBLE = ("applied", "kept")


def diagnosis_public(store: Store, row: DiagnosisRecord) -> DiagnosisPublic:
    gap = None
    if row.failure_mode == "knowledge_gap":
        gap = store.knowledge_gaps.for_answer(row.answer_id, row.collection)
    return DiagnosisPublic(
        status=row.status,
        failure_mode=row.failure_mode,
        confidence=row.confidence,
        failure_evidence=dict(row.evidence or {}),
        improvement_actions=[dict(a) for a in row.actions or []],
        rule=row.rule,
        reasons=[str(r) for r in row.reasons or []],
        ideal_source=row.ideal_source,
        collection=row.collection,
        pipeline_version=row.pipeline_version,
        replayable=row.diagnosis_input is not None,
        attempts=row.attempts,
        error=row.error,
        knowledge_gap_id=gap.gap_id if gap is not None else None,
        created_at=row.created_at,
        diagnosed_at=row.diagnosed_at,
    )


@router.get("/v1/knowledge-gaps", response_model=KnowledgeGapsPublic, summary="The knowledge-gap log (admin)")
async def knowledge_gaps(
    svc: ServiceDep,
    _admin: AdminDep,
    collection: Name = None,
    status: Annotated[str | None, Query(description=f"One of {', '.join(KNOWLEDGE_GAP_STATUSES)}; all")] = "open",
    limit: Limit = 100,
    offset: Offset = 0,
) -> KnowledgeGapsPublic:
    """Groups of similar questions the collection could not answer even with the ideal answer as the query,
    largest first: their questions, the corrections users gave, the best chunk the collection does have,
    and the questions a document filling the gap would answer."""
    wanted = None if status in (None, "all") else status
    if wanted is not None and wanted not in KNOWLEDGE_GAP_STATUSES:
        raise HTTPException(422, f"status must be one of {', '.join(KNOWLEDGE_GAP_STATUSES)} or all")
    gaps = svc.store.knowledge_gaps

    def load() -> KnowledgeGapsPublic:
        rows = gaps.listed(collection=collection, status=wanted, limit=limit, offset=offset)
        return KnowledgeGapsPublic(gaps=[KnowledgeGapPublic.model_validate(g) for g in rows], open=gaps.count())

    return await asyncio.to_thread(load)


@router.get(
    "/v1/knowledge-gaps/{gap_id}",
    response_model=KnowledgeGapPublic,
    responses={404: {"description": "No such gap."}},
    summary="One knowledge gap (admin)",
)
async def knowledge_gap(gap_id: Id, svc: ServiceDep, _admin: AdminDep) -> KnowledgeGapPublic:
    row = await asyncio.to_thread(svc.store.knowledge_gaps.get, gap_id)
    if row is None:
        raise HTTPException(404, f"no knowledge gap {gap_id!r}")
    return KnowledgeGapPublic.model_validate(row)


@router.get("/v1/improvements", response_model=ImprovementsPublic, summary="Improvement actions (admin)")
async def improvements(
    svc: ServiceDep,
    _admin: AdminDep,
    status: Annotated[list[str] | None, Query(description=f"Any of {', '.join(ACTION_STATUSES)}")] = None,
    kind: Name = None,
    domain: Name = None,
    answer_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> ImprovementsPublic:
    """Proposed, scheduled, applied, audited and reverted remediations, newest first, with their evidence,
    expected and actual deltas."""
    unknown = sorted(set(status or ()) - set(ACTION_STATUSES))
    if unknown:
        raise HTTPException(422, f"unknown status {unknown}; expected any of {', '.join(ACTION_STATUSES)}")
    actions = svc.store.improvement_actions

    def load() -> ImprovementsPublic:
        rows = actions.listed(
            status=status or None, kind=kind, domain=domain, answer_id=answer_id, limit=limit, offset=offset
        )
        return ImprovementsPublic(
            actions=[ImprovementActionPublic.model_validate(r) for r in rows], counts=actions.counts()
        )

    return await asyncio.to_thread(load)


@router.get(
    "/v1/improvements/{action_id}",
    response_model=ImprovementActionPublic,
    responses={404: {"description": "No such action."}},
    summary="One improvement action (admin)",
)
async def improvement(action_id: Id, svc: ServiceDep, _admin: AdminDep) -> ImprovementActionPublic:
    row = await asyncio.to_thread(svc.store.improvement_actions.get, action_id)
    if row is None:
        raise HTTPException(404, f"no improvement action {action_id!r}")
    return ImprovementActionPublic.model_validate(row)


@router.post(
    "/v1/improvements/{action_id}/revert",
    response_model=ImprovementActionPublic,
    responses={
        404: {"description": "No such action."},
        409: {"description": "Not applied (nothing to undo), or its kind cannot be reverted yet."},
    },
    summary="Undo an applied improvement (admin)",
)
async def revert_improvement(action_id: Id, svc: ServiceDep, admin: AdminDep) -> ImprovementActionPublic:
    """Undoes the change (the previous index generation, cache entry or config serves again), audited with
    the admin as the actor."""
    store = svc.store
    row = await asyncio.to_thread(store.improvement_actions.get, action_id)
    if row is None:
        raise HTTPException(404, f"no improvement action {action_id!r}")
    if row.status not in REVERTIBLE:
        raise HTTPException(409, f"action {action_id} is {row.status}: only applied or kept actions are reverted")
    try:
        await asyncio.to_thread(revert_action, store, action_id, actor=f"admin:{admin.key_id}", settings=svc.settings)
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    except StoreConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    after = await asyncio.to_thread(store.improvement_actions.get, action_id)
    assert after is not None
    return ImprovementActionPublic.model_validate(after)
