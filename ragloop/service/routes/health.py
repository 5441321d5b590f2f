"""Liveness, readiness and Prometheus metrics.

What a probe without a key may see: `/healthz` (liveness) and `/readyz` with the status and one
word per check (`ok`, `degraded`, `unreachable`, `missing`, `not_indexed`, `error`, `not checked`),
enough for a load balancer or an orchestrator to act on. Inventory stays behind an admin key:
`/readyz` sent with one adds the details (collection name, chunk count, pipeline version, the
error's text), and `/metrics` (collections, queue sizes, traffic) needs one: scrape it with an
admin key as a bearer token (Prometheus `authorization.credentials_file`).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from ragloop.service.deps import AdminDep, MaybeCallerDep, ServiceDep
from ragloop.service.pipelines import NoSuchCollectionError, NotIndexedError
from ragloop.service.schemas import Health, Readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness (no key needed)")
def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Something the service needs is not ready."}},
    summary="Readiness: store, index, models (details with an admin key)",
)
async def readyz(svc: ServiceDep, caller: MaybeCallerDep) -> Response:
    """Each check is one word without a key (or with a user key); an admin key adds the details."""
    summary: dict[str, str] = {}
    detail: dict[str, str] = {}
    ok = True
    if await asyncio.to_thread(svc.store.ping):
        summary["store"] = detail["store"] = "ok"
    else:
        summary["store"] = detail["store"] = "unreachable"
        ok = False
    name = svc.config.collection
    try:
        chunks = await asyncio.to_thread(svc.agents.check_index, name)
        summary["index"], detail["index"] = "ok", f"ok ({name}: {chunks} chunks)"
    except Exception as exc:
        summary["index"], detail["index"] = _word(exc), str(exc)
        ok = False
    if ok:
        try:
            served = await svc.agents.serve(name)
            summary["models"] = "degraded" if served.degraded else "ok"
            detail["models"] = f"ok (pipeline {served.version_id}{', degraded' if served.degraded else ''})"
        except Exception as exc:
            summary["models"], detail["models"] = "error", f"{type(exc).__name__}: {exc}"[:300]
            ok = False
    else:
        summary["models"] = detail["models"] = "not checked"
    checks = detail if caller is not None and caller.is_admin else summary
    body = Readiness(status="ready" if ok else "not_ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


def _word(exc: Exception) -> str:
    if isinstance(exc, NoSuchCollectionError):
        return "missing"
    if isinstance(exc, NotIndexedError):
        return "not_indexed"
    return "error"


@router.get("/metrics", summary="Prometheus metrics (admin)", response_class=Response)
def metrics(svc: ServiceDep, _admin: AdminDep) -> Response:
    data, content_type = svc.metrics.render()
    return Response(content=data, media_type=content_type)
