"""Dependency aliases for the routes: `Service`, `Store`, `Caller` (any valid key), `Admin` (admin key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ragloop.service.auth import Caller, RateLimiter
from ragloop.service.state import ServiceState
from ragloop.store import Store

bearer = HTTPBearer(auto_error=False, description="An API key: `ragloop keys create --role user|admin`.")
UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


def get_service(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


ServiceDep = Annotated[ServiceState, Depends(get_service)]


def get_store(svc: ServiceDep) -> Store:
    return svc.store


StoreDep = Annotated[Store, Depends(get_store)]


def authenticate(
    request: Request,
    response: Response,
    svc: ServiceDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """A valid, unrevoked key within its rate limit (runs in the thread pool: one indexed lookup)."""
    if credentials is None:
        raise HTTPException(401, "missing API key: send `Authorization: Bearer <key>`", headers=UNAUTHORIZED)
    record = svc.store.api_keys.verify_api_key(credentials.credentials)
    if record is None:
        raise HTTPException(401, "invalid or revoked API key", headers=UNAUTHORIZED)
    caller = Caller.from_record(record)
    request.state.key_id = caller.key_id
    allowed, retry_after, limit, remaining = svc.limiter.hit(caller.key_id, caller.rate_limit_per_minute)
    if not allowed:
        svc.metrics.rate_limited.inc()
        raise HTTPException(
            429,
            f"rate limit of {limit} requests per minute exceeded for this key; retry later",
            headers={
                "Retry-After": RateLimiter.retry_after_header(retry_after),
                "X-RateLimit-Limit": str(limit),
                "X-RateLimit-Remaining": "0",
            },
        )
    response.headers["X-RateLimit-Limit"] = str(limit)
    response.headers["X-RateLimit-Remaining"] = str(remaining)
    return caller


CallerDep = Annotated[Caller, Depends(authenticate)]


def require_admin(caller: CallerDep) -> Caller:
    if not caller.is_admin:
        raise HTTPException(403, "this route needs an admin key")
    return caller


AdminDep = Annotated[Caller, Depends(require_admin)]
