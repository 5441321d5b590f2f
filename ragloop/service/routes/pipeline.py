"""The pipeline version that answers: read it, list versions, register candidates, diff two versions,
roll back (admin)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from ragloop.experiments.activation_audit import Switch, switches
from ragloop.experiments.versions import ConfigError, diff_versions, full_config, register_candidate
from ragloop.service.deps import AdminDep, CallerDep, ServiceDep
from ragloop.service.experiment_schemas import CandidateCreate, ConfigChangePublic, VersionDiffPublic
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
        parent_version=row.parent_version_id,
        created_by=row.created_by,
        created_at=row.created_at,
        promoted_via=row.promoted_via,
        approvals=list(row.approvals or []),
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


@router.get(
    "/v1/pipeline/switches",
    response_model=list[Switch],
    summary="Every switch of the current version with its expected and measured delta (admin)",
)
def pipeline_switches(svc: ServiceDep, _admin: AdminDep) -> list[Switch]:
    """Oldest first; `actual_delta` is null until the switch's window has passed and the periodic
    activation audit measured it (`ragloop.experiments.activation_audit`)."""
    return switches(svc.store)


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
            via="admin",
        )
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    except StoreConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    svc.agents.invalidate()
    return _public(row)


@router.post(
    "/v1/pipeline/candidates",
    status_code=201,
    response_model=PipelinePublic,
    responses={401: {"description": "No (valid) key."}, 403: {"description": "Not an admin key."}, 422: {}},
    summary="Register a candidate pipeline version (admin)",
)
def register(body: CandidateCreate, svc: ServiceDep, admin: AdminDep) -> PipelinePublic:
    """`overrides` apply to `parent` (default: the current version); `config` is taken whole. The
    candidate serves nothing until an experiment, an admin or a remediation promotes it."""
    try:
        cfg = full_config(body.config) if body.config is not None else body.overrides or {}
        row = register_candidate(
            svc.store, cfg, created_by=f"key:{admin.key_id}", parent=body.parent, description=body.description
        )
    except ConfigError as exc:
        raise HTTPException(422, str(exc)) from None
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None
    return _public(row)


@router.get(
    "/v1/pipeline/versions/{a}/diff/{b}",
    response_model=VersionDiffPublic,
    responses={404: {"description": "Unknown version."}},
    summary="What changes from version a to version b (admin)",
)
def diff(a: str, b: str, svc: ServiceDep, _admin: AdminDep) -> VersionDiffPublic:
    try:
        changes = diff_versions(svc.store, a, b)
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None
    return VersionDiffPublic(
        a=a, b=b, changes=[ConfigChangePublic(path=c.path, before=c.before, after=c.after) for c in changes]
    )
