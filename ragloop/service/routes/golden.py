"""The golden set (admin): list, add, deprecate. The database is the one golden set; JSONL is only
import/export (`ragloop golden import|export`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from ragloop.experiments.golden import GoldenLine, add_entry, entry_json
from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.experiment_schemas import GoldenEntryCreate
from ragloop.store import NotFoundError, StoreConflictError

router = APIRouter(tags=["golden"])
ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "No (valid) key."}, 403: {"description": "Not admin."}}


@router.get("/v1/golden", responses=ERRORS, summary="The live golden set (admin)")
def list_golden(svc: ServiceDep, _admin: AdminDep, include_held_out: bool = True) -> dict[str, Any]:
    rows = svc.store.golden.current_golden_set(include_held_out=include_held_out)
    return {
        "golden_set_version": svc.store.golden.golden_set_version(),
        "count": len(rows),
        "held_out": sum(1 for r in rows if r.held_out),
        "entries": [entry_json(r) for r in rows],
    }


@router.post("/v1/golden", status_code=201, responses=ERRORS, summary="Add a golden entry (admin)")
def add_golden(body: GoldenEntryCreate, svc: ServiceDep, admin: AdminDep) -> dict[str, Any]:
    """Whether it is held out is decided by a stable hash of the question, never by the caller."""
    line = GoldenLine(
        question=body.question,
        expected_answer=body.expected_answer,
        required_doc_ids=body.required_doc_ids,
        required_chunk_ids=body.required_chunk_ids,
        difficulty=body.difficulty,
        domain_tags=body.domain_tags,
        source="human",
        should_refuse=body.should_refuse,
    )
    row = add_entry(svc.store, line, created_by=f"key:{admin.key_id}")
    svc.store.audit.record(
        "golden_add", triggered_by="POST /v1/golden", actor=f"key:{admin.key_id}", evidence={"entry_id": row.entry_id}
    )
    return entry_json(row)


@router.post("/v1/golden/{entry_id}/deprecate", responses=ERRORS | {404: {}, 409: {}}, summary="Retire an entry")
def deprecate_golden(entry_id: str, svc: ServiceDep, admin: AdminDep) -> dict[str, Any]:
    try:
        row = svc.store.golden.deprecate_golden_entry(entry_id)
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    except StoreConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    svc.store.audit.record(
        "golden_deprecate",
        triggered_by="POST /v1/golden/{id}/deprecate",
        actor=f"key:{admin.key_id}",
        evidence={"entry_id": entry_id},
    )
    return entry_json(row)
