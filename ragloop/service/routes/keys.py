"""API keys (admin): issue, list, revoke. The first admin key comes from `ragloop keys create --role admin`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status

from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.schemas import Deleted, KeyCreate, KeyIssued, KeyPublic
from ragloop.store import ApiKeyRecord

router = APIRouter(tags=["keys"])


def _public(rec: ApiKeyRecord) -> KeyPublic:
    return KeyPublic(
        key_id=rec.key_id,
        role=rec.role,
        name=rec.name,
        rate_limit_per_minute=rec.rate_limit_per_minute,
        created_at=rec.created_at,
        revoked_at=rec.revoked_at,
    )


@router.post("/v1/keys", response_model=KeyIssued, status_code=status.HTTP_201_CREATED, summary="Issue a key (admin)")
def create_key(body: KeyCreate, svc: ServiceDep, _admin: AdminDep) -> KeyIssued:
    issued = svc.store.api_keys.create_api_key(
        body.role, name=body.name, rate_limit_per_minute=body.rate_limit_per_minute
    )
    return KeyIssued(key=issued.key, **_public(issued.record).model_dump())


@router.get("/v1/keys", response_model=list[KeyPublic], summary="Active keys (admin)")
def list_keys(svc: ServiceDep, _admin: AdminDep) -> list[KeyPublic]:
    return [_public(r) for r in svc.store.api_keys.list_keys()]


@router.delete("/v1/keys/{key_id}", response_model=Deleted, summary="Revoke a key (admin)")
def revoke_key(key_id: Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")], svc: ServiceDep, _admin: AdminDep) -> Deleted:
    if not svc.store.api_keys.revoke(key_id):
        raise HTTPException(404, f"no active key {key_id!r}")
    return Deleted(deleted=True)
