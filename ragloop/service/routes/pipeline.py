"""The pipeline version that answers: read it, list versions, roll back (admin)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from ragloop.service.deps import AdminDep, CallerDep, ServiceDep
from ragloop.service.schemas import PipelinePublic, RollbackCreate
from ragloop.store import NotFoundError, PipelineVersion, StoreConflictError

router = APIRouter(tags=["pipeline"])


def _public(row: PipelineVersion) -> PipelinePublic:
    return PipelinePublic(
        version=row.version_id,
        config=row.config,
        status=row.status,
        description=row.description,
        promoted_at=row.activated_at,
        promoted_by=row.promoted_by,
        previous_version=row.previous_version_id,
        quality_at_promotion=row.quality_at_promotion or {},
    )


@router.get(
    "/v1/pipeline/current",
    response_model=PipelinePublic,
    responses={404: {"description": "No pipeline version is active yet."}},
    summary="The active pipeline version",
)
def current_pipeline(svc: ServiceDep, _caller: CallerDep) -> PipelinePublic:
    row = svc.store.pipelines.current()
    if row is None:
        raise HTTPException(404, "no pipeline version is active")
    return _public(row)


@router.get("/v1/pipeline/versions", response_model=list[PipelinePublic], summary="Every stored version (admin)")
def pipeline_versions(svc: ServiceDep, _admin: AdminDep) -> list[PipelinePublic]:
    return [_public(r) for r in svc.store.pipelines.list_versions()]


@router.post(
    "/v1/pipeline/rollback",
    response_model=PipelinePublic,
    responses={
        401: {"description": "No (valid) key."},
        403: {"description": "Not an admin key."},
        404: {"description": "Unknown target version."},
        409: {"description": "Nothing to roll back to."},
    },
    summary="Roll back to the previous (or a named) pipeline version (admin)",
)
def rollback(body: RollbackCreate, svc: ServiceDep, admin: AdminDep) -> PipelinePublic:
    """Audited in the improvement log; the next query is answered by the version rolled back to."""
    try:
        row = svc.store.pipelines.rollback(
            target_version=body.target_version,
            actor=f"key:{admin.key_id}",
            reason=body.reason,
            evidence={"via": "POST /v1/pipeline/rollback"},
        )
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    except StoreConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    svc.agents.invalidate()
    return _public(row)
