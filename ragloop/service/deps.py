"""Dependency aliases for the routes: `Service`, `Store`, `Caller` (any valid key), `Admin` (admin key),
`MaybeCaller` (a valid key or none, for routes that show more to a key than to an anonymous probe)."""

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
    """A valid, unrevoked key within its rate limit (runs in the thread pool: one indexed lookup).
    An address with too many refused keys gets 429 before its key is looked up."""
    if credentials is None:
        raise HTTPException(401, "missing API key: send `Authorization: Bearer <key>`", headers=UNAUTHORIZED)
    return _verified(request, response, svc, credentials.credentials)


def _verified(request: Request, response: Response, svc: ServiceState, key: str) -> Caller:
    address = client_address(request)
    failures = svc.limiter.failures
    wait = failures.retry_after(address)
    if wait is not None:
        svc.metrics.auth_blocked.inc()
        raise HTTPException(
            429,
            f"too many refused API keys from this address (limit {failures.per_minute} a minute); retry later",
            headers={"Retry-After": RateLimiter.retry_after_header(wait)},
        )
    record = svc.store.api_keys.verify_api_key(key)
    if record is None:
        failures.failed(address)
        svc.metrics.auth_failures.inc()
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


def client_address(request: Request) -> str:
    """The peer's address as the server sees it (behind a proxy: what `--proxy-headers` made of it)."""
    return request.client.host if request.client is not None else "unknown"


def authenticate_optional(
    request: Request,
    response: Response,
    svc: ServiceDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller | None:
    """None without a key; with one, exactly `authenticate` (a wrong key is still a 401)."""
    return None if credentials is None else _verified(request, response, svc, credentials.credentials)


CallerDep = Annotated[Caller, Depends(authenticate)]


def require_admin(caller: CallerDep) -> Caller:
    if not caller.is_admin:
        raise HTTPException(403, "this route needs an admin key")
    return caller


AdminDep = Annotated[Caller, Depends(require_admin)]
MaybeCallerDep = Annotated[Caller | None, Depends(authenticate_optional)]
