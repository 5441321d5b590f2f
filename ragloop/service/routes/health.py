"""Liveness, readiness and Prometheus metrics (no key needed: nothing secret in them)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from ragloop.service.deps import ServiceDep
from ragloop.service.schemas import Health, Readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness")
def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Something the service needs is not ready."}},
    summary="Readiness: store, index, models",
)
async def readyz(svc: ServiceDep) -> Response:
    import asyncio

    checks: dict[str, str] = {}
    ok = True
    if await asyncio.to_thread(svc.store.ping):
        checks["store"] = "ok"
    else:
        checks["store"] = "unreachable"
        ok = False
    name = svc.config.collection
    try:
        chunks = await asyncio.to_thread(svc.agents.check_index, name)
        checks["index"] = f"ok ({name}: {chunks} chunks)"
    except Exception as exc:
        checks["index"] = str(exc)
        ok = False
    if ok:
        try:
            served = await svc.agents.serve(name)
            checks["models"] = f"ok (pipeline {served.version_id}{', degraded' if served.degraded else ''})"
        except Exception as exc:
            checks["models"] = f"{type(exc).__name__}: {exc}"[:300]
            ok = False
    else:
        checks["models"] = "not checked"
    body = Readiness(status="ready" if ok else "not_ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(svc: ServiceDep) -> Response:
    data, content_type = svc.metrics.render()
    return Response(content=data, media_type=content_type)
