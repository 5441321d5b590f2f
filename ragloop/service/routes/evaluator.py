"""Evaluator drift (admin, read-only): the accepted judge pin, refused candidates, the latest rubric
check (tier-2 scores vs implicit satisfaction, n and 95% CI) and whether the rubric is flagged.
Qualifying a new judge is `ragloop drift qualify` (it runs the judge over the human labels)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ragloop.experiments.judges import drift_status
from ragloop.service.deps import AdminDep, ServiceDep

router = APIRouter(tags=["evaluator"])
ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "No (valid) key."}, 403: {"description": "Not admin."}}


@router.get("/v1/evaluator/drift", responses=ERRORS, summary="Judge pin and rubric check (admin)")
def evaluator_drift(svc: ServiceDep, _admin: AdminDep) -> dict[str, Any]:
    return drift_status(svc.store)
