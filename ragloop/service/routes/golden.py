"""The golden set (admin): list (now or at any version), add, revise, deprecate, versions, diff, summary.
The database is the one golden set; JSONL is only import/export (`ragloop golden import|export`).
The review queue, nomination, coverage and generation are `routes/golden_review.py`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Query

from ragloop.experiments.golden import GoldenLine, add_entry, entry_json, revise
from ragloop.experiments.golden_versions import diff_versions, summary, target_mix
from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.experiment_schemas import GoldenEntryCreate
from ragloop.service.golden_schemas import (
    GoldenDeprecate,
    GoldenDiffPublic,
    GoldenEntryPublic,
    GoldenRevise,
    GoldenSetPublic,
    GoldenSummaryPublic,
    GoldenVersionPublic,
    GoldenVersionsPublic,
)
from ragloop.store import NotFoundError, StoreConflictError
from ragloop.store.vocabulary import GoldenSource

router = APIRouter(tags=["golden"])
ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "No (valid) key."}, 403: {"description": "Not admin."}}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such entry or version."}}
Version = Annotated[int | None, Query(ge=0, description="A golden-set version (default: the current set).")]


@router.get("/v1/golden", responses=ERRORS | NOT_FOUND, summary="The golden set, now or at a version (admin)")
def list_golden(
    svc: ServiceDep, _admin: AdminDep, include_held_out: bool = True, version: Version = None
) -> GoldenSetPublic:
    try:
        if version is None:
            rows = svc.store.golden.current_golden_set(include_held_out=include_held_out)
            v = svc.store.golden.golden_set_version()
        else:
            rows, v = svc.store.golden.golden_set_at_version(version, include_held_out=include_held_out), version
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    return GoldenSetPublic(
        golden_set_version=v,
        count=len(rows),
        held_out=sum(1 for r in rows if r.held_out),
        entries=[GoldenEntryPublic(**entry_json(r)) for r in rows],
    )


@router.post("/v1/golden", status_code=201, responses=ERRORS, summary="Add a golden entry (admin)")
def add_golden(body: GoldenEntryCreate, svc: ServiceDep, admin: AdminDep) -> GoldenEntryPublic:
    """A person's question (source `human`): one new golden-set version. Whether it is held out
    is decided by a stable hash of the question, never by the caller."""
    line = GoldenLine(
        question=body.question,
        expected_answer=body.expected_answer,
        required_doc_ids=body.required_doc_ids,
        required_chunk_ids=body.required_chunk_ids,
        difficulty=body.difficulty,
        domain_tags=body.domain_tags,
        should_refuse=body.should_refuse,
    )
    row = add_entry(svc.store, line, created_by=f"key:{admin.key_id}", source=GoldenSource.HUMAN)
    svc.store.audit.record(
        "golden_add", triggered_by="POST /v1/golden", actor=f"key:{admin.key_id}", evidence={"entry_id": row.entry_id}
    )
    return GoldenEntryPublic(**entry_json(row))


@router.post(
    "/v1/golden/{entry_id}/deprecate",
    responses=ERRORS | NOT_FOUND | {409: {"description": "Already deprecated."}},
    summary="Retire an entry (admin)",
)
def deprecate_golden(
    entry_id: str, svc: ServiceDep, admin: AdminDep, body: Annotated[GoldenDeprecate | None, Body()] = None
) -> GoldenEntryPublic:
    actor = f"key:{admin.key_id}"
    note = body.note if body is not None else None
    try:
        row = svc.store.golden.deprecate_golden_entry(entry_id, actor=actor, note=note)
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    except StoreConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    svc.store.audit.record(
        "golden_deprecate",
        triggered_by="POST /v1/golden/{id}/deprecate",
        actor=actor,
        evidence={"entry_id": entry_id, "note": note, "golden_set_version": row.deprecated_in},
    )
    return GoldenEntryPublic(**entry_json(row))


@router.post(
    "/v1/golden/{entry_id}/revise",
    responses=ERRORS | NOT_FOUND | {409: {"description": "Not the live version."}},
    summary="Revise an entry: its next version (admin)",
)
def revise_golden(entry_id: str, body: GoldenRevise, svc: ServiceDep, admin: AdminDep) -> GoldenEntryPublic:
    """Inserts the next version of the entry's lineage and deprecates this one, as one golden-set
    version (a diff shows it as changed). Only the live version can be revised."""
    actor = f"key:{admin.key_id}"
    changes = body.model_dump(exclude={"note"})
    try:
        row = revise(svc.store, entry_id, actor=actor, note=body.note, **changes)
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    except StoreConflictError as exc:
        raise HTTPException(409, str(exc)) from None
    svc.store.audit.record(
        "golden_revise",
        triggered_by="POST /v1/golden/{id}/revise",
        actor=actor,
        evidence={"entry_id": entry_id, "new_entry_id": row.entry_id, "golden_set_version": row.added_in},
    )
    return GoldenEntryPublic(**entry_json(row))


@router.get("/v1/golden/versions", responses=ERRORS, summary="The golden set's change log, newest first (admin)")
def golden_versions(
    svc: ServiceDep,
    _admin: AdminDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> GoldenVersionsPublic:
    rows = svc.store.golden.versions(limit=limit, offset=offset)
    return GoldenVersionsPublic(
        golden_set_version=svc.store.golden.golden_set_version(),
        versions=[
            GoldenVersionPublic(
                version=r.version,
                kind=r.kind,
                actor=r.actor,
                note=r.note,
                added=list(r.added or []),
                deprecated=list(r.deprecated or []),
                created_at=r.created_at.isoformat(),
            )
            for r in rows
        ],
    )


@router.get("/v1/golden/diff", responses=ERRORS | NOT_FOUND, summary="What changed between two versions (admin)")
def golden_diff(
    svc: ServiceDep,
    _admin: AdminDep,
    from_version: Annotated[int, Query(ge=0)],
    to_version: Annotated[int | None, Query(ge=0, description="Default: the current version.")] = None,
) -> GoldenDiffPublic:
    """Entries added, deprecated and changed (revised: the fields that differ) from one version to another."""
    b = svc.store.golden.golden_set_version() if to_version is None else to_version
    try:
        return GoldenDiffPublic.model_validate(diff_versions(svc.store, from_version, b).to_json())
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None


@router.get(
    "/v1/golden/summary", responses=ERRORS | NOT_FOUND, summary="Counts by source and the difficulty mix (admin)"
)
def golden_summary(svc: ServiceDep, _admin: AdminDep, version: Version = None) -> GoldenSummaryPublic:
    """The difficulty mix against the target (`RAGLOOP_GOLDEN_TARGET_MIX`, checked at start-up), each share with n and a
    Wilson 95% interval, and a verdict only where the interval excludes the target."""
    try:
        return GoldenSummaryPublic.model_validate(
            summary(svc.store, target_mix(svc.config.golden_target_mix), version=version)
        )
    except NotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
