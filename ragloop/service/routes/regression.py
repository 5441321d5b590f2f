"""The golden-set regression runs (admin): the report data behind `ragloop regress report`.

Read-only: a run itself is started by `ragloop regress` or the scheduler inside `ragloop serve`
(`RAGLOOP_REGRESSION_INTERVAL_S`), never over HTTP, so a stolen admin key cannot trigger a
rollback storm.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from ragloop.experiments.regression_report import regression_history, summarize_run
from ragloop.service.deps import AdminDep, ServiceDep

router = APIRouter(tags=["regression"])
ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "No (valid) key."}, 403: {"description": "Not admin."}}


@router.get("/v1/regression/runs", responses=ERRORS, summary="Regression runs with n and 95% CIs (admin)")
def list_runs(svc: ServiceDep, _admin: AdminDep, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> dict[str, Any]:
    """Oldest first: per metric mean, n and 95% interval, and the paired comparison with the baseline."""
    return regression_history(svc.store, limit=limit).to_json()


@router.get(
    "/v1/regression/runs/{run_id}",
    responses=ERRORS | {404: {"description": "No such run."}},
    summary="One regression run (admin)",
)
def get_run(run_id: str, svc: ServiceDep, _admin: AdminDep) -> dict[str, Any]:
    run = svc.store.regressions.get(run_id)
    if run is None:
        raise HTTPException(404, f"no regression run {run_id!r}")
    return summarize_run(run).to_json() | {"items": dict((run.report or {}).get("items") or {})}
