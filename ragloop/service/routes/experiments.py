"""A/B experiments between pipeline versions (admin): create, list, results, stop, promote, reject."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from ragloop.experiments import ExperimentStatus
from ragloop.experiments.aggregation import aggregate, stored_results
from ragloop.experiments.promotion import MaintenanceWindow, promote_experiment
from ragloop.experiments.registry import (
    ExperimentConflictError,
    ExperimentError,
    create_experiment,
    end_experiment,
)
from ragloop.experiments.registry import utc_now as _now
from ragloop.experiments.runtime import golden_smoke_test
from ragloop.experiments.versions import PromotedVia
from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.experiment_schemas import ExperimentAction, ExperimentCreate, ExperimentPublic
from ragloop.service.state import ServiceState
from ragloop.store import Experiment

router = APIRouter(tags=["experiments"])
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No (valid) key."},
    403: {"description": "Not an admin key."},
    404: {"description": "No such experiment."},
}


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def public(row: Experiment) -> ExperimentPublic:
    return ExperimentPublic(
        experiment_id=row.experiment_id,
        name=row.name,
        status=row.status,
        status_reason=row.status_reason,
        control_version=row.control_version,
        treatment_version=row.treatment_version,
        traffic_split=row.traffic_split,
        min_sample_size=row.min_sample_size,
        min_duration_s=row.min_duration_s,
        min_effect=row.min_effect,
        primary_metric=row.primary_metric,
        guardrail_metrics=list(row.guardrail_metrics),
        recommendation=row.recommendation,
        created_by=row.created_by,
        started_at=_iso(row.started_at),
        ended_at=_iso(row.ended_at),
        promoted_at=_iso(row.promoted_at),
    )


def _get(svc: ServiceState, experiment_id: str) -> Experiment:
    row = svc.store.experiments.get(experiment_id)
    if row is None:
        raise HTTPException(404, f"no experiment {experiment_id!r}")
    return row


def _changed(svc: ServiceState) -> None:
    if svc.experiments is not None:
        svc.experiments.invalidate()
    svc.agents.invalidate()


@router.post(
    "/v1/experiments",
    status_code=201,
    response_model=ExperimentPublic,
    responses=ERRORS | {409: {"description": "Another experiment is running."}, 422: {"description": "Invalid."}},
    summary="Start an experiment (admin)",
)
def create(body: ExperimentCreate, svc: ServiceDep, admin: AdminDep) -> ExperimentPublic:
    """Arms are config overrides of the current version or version ids; 422 names what is wrong."""
    try:
        row = create_experiment(svc.store, body, actor=f"key:{admin.key_id}")
    except ExperimentError as exc:
        raise HTTPException(422, str(exc)) from None
    except ExperimentConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    _changed(svc)
    return public(row)


@router.get("/v1/experiments", response_model=list[ExperimentPublic], responses=ERRORS, summary="Experiments (admin)")
def list_experiments(svc: ServiceDep, _admin: AdminDep, status: str | None = None) -> list[ExperimentPublic]:
    return [public(r) for r in svc.store.experiments.list_experiments(status=status)]


@router.get("/v1/experiments/{experiment_id}", response_model=ExperimentPublic, responses=ERRORS)
def get_experiment(experiment_id: str, svc: ServiceDep, _admin: AdminDep) -> ExperimentPublic:
    return public(_get(svc, experiment_id))


@router.get("/v1/experiments/{experiment_id}/results", responses=ERRORS, summary="The latest look (admin)")
def results(experiment_id: str, svc: ServiceDep, _admin: AdminDep) -> dict[str, Any]:
    """Per-variant metrics with 95% intervals, always-valid and Welch p-values, samples,
    recommendation and auto-promote time. A running experiment is aggregated now (guardrails and
    promotion rules apply exactly as in the periodic task)."""
    row = _get(svc, experiment_id)
    if row.status != ExperimentStatus.RUNNING:
        return stored_results(row)
    out = aggregate(
        svc.store,
        experiment_id,
        smoke_test=golden_smoke_test(svc.store, svc.settings, svc.config.collection),
        window=MaintenanceWindow.parse(svc.config.promotion_window),
        actor="results request",
    )
    _changed(svc)
    return out


def _end(svc: ServiceState, experiment_id: str, to: ExperimentStatus, actor: str, reason: str) -> ExperimentPublic:
    _get(svc, experiment_id)
    try:
        row = end_experiment(svc.store, experiment_id, to, actor=actor, reason=reason)
    except ExperimentConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    _changed(svc)
    return public(row)


@router.post("/v1/experiments/{experiment_id}/stop", response_model=ExperimentPublic, responses=ERRORS)
def stop(
    experiment_id: str, svc: ServiceDep, admin: AdminDep, body: ExperimentAction | None = None
) -> ExperimentPublic:
    """End without a verdict: everyone is served the current version again (admin)."""
    return _end(
        svc, experiment_id, ExperimentStatus.STOPPED, f"key:{admin.key_id}", (body or ExperimentAction()).reason
    )


@router.post("/v1/experiments/{experiment_id}/reject", response_model=ExperimentPublic, responses=ERRORS)
def reject(
    experiment_id: str, svc: ServiceDep, admin: AdminDep, body: ExperimentAction | None = None
) -> ExperimentPublic:
    """Keep control (admin)."""
    return _end(
        svc, experiment_id, ExperimentStatus.REJECTED, f"key:{admin.key_id}", (body or ExperimentAction()).reason
    )


@router.post("/v1/experiments/{experiment_id}/promote", responses=ERRORS | {409: {"description": "Not promotable."}})
def promote(
    experiment_id: str, svc: ServiceDep, admin: AdminDep, body: ExperimentAction | None = None
) -> dict[str, Any]:
    """An admin's promotion of the treatment, whatever the statistics say (the evidence so far is
    audited with it); the golden-set smoke test still runs first and aborts on failure."""
    row = _get(svc, experiment_id)
    outcome = promote_experiment(
        svc.store,
        experiment_id,
        evidence=stored_results(row) | {"admin_reason": (body or ExperimentAction()).reason},
        clock=_now,
        smoke_test=golden_smoke_test(svc.store, svc.settings, svc.config.collection),
        actor=f"key:{admin.key_id}",
        via=PromotedVia.ADMIN,
        from_statuses=(ExperimentStatus.RUNNING, ExperimentStatus.HALTED),
    )
    _changed(svc)
    if not outcome.promoted:
        raise HTTPException(409, outcome.reason)
    return outcome.to_json()
