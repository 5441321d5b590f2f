"""The golden-set regression runs (admin): the report data behind `ragloop regress report`.

A run itself is started by `ragloop regress` or the scheduler inside `ragloop serve`
(`RAGLOOP_REGRESSION_INTERVAL_S`), never over HTTP, so a stolen admin key cannot trigger a
rollback storm. The alert webhook is a stored setting (`ragloop.experiments.alerts`): shown
redacted, set (audited), cleared, and tested with a test alert; the URL's path and the signing
secret never leave the server.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from ragloop.experiments.alerts import clear_webhook, deliver, resolve_webhook, set_webhook
from ragloop.experiments.regression_report import regression_history, summarize_run
from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.state import ServiceState

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


class WebhookIn(BaseModel):
    url: str = Field(max_length=2000, description="http(s) URL the alert JSON is POSTed to.")
    secret: str | None = Field(default=None, max_length=500, description="HMAC-SHA256 signing secret (write-only).")
    attempts: int = Field(default=3, ge=1, le=10)
    timeout_s: float = Field(default=5.0, gt=0, le=60)


def _current(svc: ServiceState) -> dict[str, Any]:
    hook = resolve_webhook(svc.store, None, svc.config.regression_webhook_url)
    return hook.public() if hook else {"url": None, "source": None}


@router.get("/v1/regression/webhook", responses=ERRORS, summary="Where regression alerts go (admin)")
def get_webhook(svc: ServiceDep, _admin: AdminDep) -> dict[str, Any]:
    """The URL redacted to scheme, host and port; `source`: setting | environment | null (log only)."""
    return _current(svc)


@router.put(
    "/v1/regression/webhook",
    responses=ERRORS | {422: {"description": "Not an http(s) URL, or limits out of range."}},
    summary="Set the regression alert webhook (admin, audited)",
)
def put_webhook(body: WebhookIn, svc: ServiceDep, admin: AdminDep) -> dict[str, Any]:
    try:
        set_webhook(
            svc.store, body.url, secret=body.secret, attempts=body.attempts, timeout_s=body.timeout_s,
            actor=f"key:{admin.key_id}",
        )  # fmt: skip
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    return _current(svc)


@router.delete("/v1/regression/webhook", responses=ERRORS, summary="Clear the stored webhook (admin, audited)")
def delete_webhook(svc: ServiceDep, admin: AdminDep) -> dict[str, Any]:
    return {"cleared": clear_webhook(svc.store, actor=f"key:{admin.key_id}")} | _current(svc)


@router.post(
    "/v1/regression/webhook/test",
    responses=ERRORS | {409: {"description": "No webhook configured."}},
    summary="Send a test alert (admin)",
)
def test_webhook(svc: ServiceDep, _admin: AdminDep) -> dict[str, Any]:
    hook = resolve_webhook(svc.store, None, svc.config.regression_webhook_url)
    if hook is None:
        raise HTTPException(409, "no webhook configured: PUT /v1/regression/webhook")
    return deliver(hook, "ragloop test alert: the regression webhook works", {"test": True}).to_json()
