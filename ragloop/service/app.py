"""The app factory: `create_app(settings, store_url=None, ...)` builds the engine, store, pipeline
manager, worker and routes of one service instance. Nothing is a module global, so tests (and two
apps in one process) get their own database and state.

Start-up registers the pipeline config (the one given, else the defaults when nothing is active
yet) and activates it; otherwise the stored active version keeps answering. The lifespan opens the
conversation memory (which follows the store: `ragloop.service.memory`), takes up document jobs
the last run left unfinished, starts the embedded evaluation worker and, on shutdown, stops the
worker and closes what the app opened (answers are stored before their response, so no write is
left to drain).
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.types import Scope

from ragloop import tracing
from ragloop.config import PipelineConfig, Settings
from ragloop.improve.clock import SYSTEM_CLOCK, Clock
from ragloop.improve.engine import DiagnosisConfig, DiagnosisEngine
from ragloop.improve.judge import Judge, make_judge
from ragloop.service.auth import BodySizeLimit
from ragloop.service.config import ServiceConfig
from ragloop.service.documents import DocumentJobs
from ragloop.service.inputs import checked_params
from ragloop.service.metrics import ServiceMetrics
from ragloop.service.openai_compat import OpenAIError, error_body
from ragloop.service.openai_compat import router as openai_router
from ragloop.service.periodic import PeriodicTasks
from ragloop.service.pipelines import AgentFactory, AgentManager, ExperimentRouter, ensure_active_version
from ragloop.service.rate_limit import make_rate_limiter
from ragloop.service.recorder import AnswerRecorder
from ragloop.service.routes import ROUTERS
from ragloop.service.state import ServiceState
from ragloop.service.worker import EvaluationWorker
from ragloop.store import NotFoundError, Store
from ragloop.web import router as web_router

log = logging.getLogger("ragloop.service")
access = logging.getLogger("ragloop.service.access")

UPLOAD_OVERHEAD = 256 * 1024
OPENAI_PATHS = ("/v1/chat/", "/v1/models")

DESCRIPTION = """Answers questions from a document collection with inline citations, checks its own answers,
and evaluates every answer asynchronously (tier 1 heuristics on all, tier 2 judge on a routed share,
tier 3 human review). Authenticate with `Authorization: Bearer <key>` (`ragloop keys create`)."""


def diagnosis_engine(store: Store, settings: Settings, cfg: ServiceConfig) -> DiagnosisEngine | None:
    """The worker's failure diagnosis (`RAGLOOP_DIAGNOSIS_*` knobs; the service's default collection),
    unless `cfg.diagnose` is off."""
    if not cfg.diagnose:
        return None
    return DiagnosisEngine(store, settings, DiagnosisConfig.from_env(default_collection=cfg.collection))


def remediation_pass(
    store: Store, settings: Settings, cfg: ServiceConfig, active: Callable[[], PipelineConfig]
) -> Callable[[], object] | None:
    """The worker's remediation pass over the serving pipeline (`active()`), unless `cfg.remediate` is off."""
    if not cfg.remediate:
        return None
    from ragloop.improve.remediate import run_pass
    from ragloop.improve.remediation import RemediationSettings

    remediation = RemediationSettings(answer_check=cfg.answer_check)
    return lambda: run_pass(
        store, active(), settings=settings, label_collection=cfg.collection, remediation=remediation
    )


def create_app(
    settings: Settings | None = None,
    store_url: str | None = None,
    *,
    config: PipelineConfig | None = None,
    service_config: ServiceConfig | None = None,
    store: Store | None = None,
    agent_factory: AgentFactory | None = None,
    judge: Judge | None = None,
    worker: bool | None = None,
) -> FastAPI:
    """One service instance.

    `store_url` defaults to `RAGLOOP_DATABASE_URL`, else `RAGLOOP_HOME/ragloop.db` (migrated on open);
    pass `store` to share one (it is then not closed here). `config` is the pipeline to activate
    (default: keep the active one). `agent_factory`, `judge` are seams for tests; `worker` overrides
    `service_config.inprocess_worker`.
    """
    settings = settings or Settings.from_env()
    cfg = service_config or ServiceConfig.from_env()
    owns_store = store is None
    store = store or Store.open(store_url)
    metrics = ServiceMetrics(store)
    ensure_active_version(store, config)
    agents = AgentManager(settings, store, agent_factory)

    run_worker = cfg.inprocess_worker if worker is None else worker
    eval_worker: EvaluationWorker | None = None
    if run_worker:
        if judge is None and cfg.judge:
            judge = make_judge(cfg.judge, settings, calls=store.model_calls)
        support = None
        if cfg.heuristic_support:
            from ragloop.models.scoring import make_scorer

            support = make_scorer(cfg.heuristic_support, settings, calls=store.model_calls)
        eval_worker = EvaluationWorker(
            store,
            cfg,
            judge=judge,
            support_scorer=support,
            metrics=metrics,
            diagnosis=diagnosis_engine(store, settings, cfg),
            remediation=remediation_pass(store, settings, cfg, lambda: agents.active()[1]),
        )

    recorder = AnswerRecorder(
        store,
        metrics,
        on_queued=eval_worker.notify if eval_worker is not None else None,
        timeout_s=cfg.answer_write_timeout_s,
    )

    def _active_config() -> PipelineConfig:
        return agents.active()[1]

    documents = DocumentJobs(
        settings,
        store,
        _active_config,
        owner=cfg.instance,
        on_done=lambda job: metrics.ingest_jobs.labels(job.kind, job.status).inc(),
    )
    state = ServiceState(
        settings=settings,
        config=cfg,
        store=store,
        owns_store=owns_store,
        metrics=metrics,
        limiter=make_rate_limiter(
            cfg.redis_url, cfg.rate_limit_per_minute, failures_per_minute=cfg.auth_failures_per_minute
        ),
        agents=agents,
        recorder=recorder,
        documents=documents,
        worker=eval_worker,
        experiments=ExperimentRouter(store, cfg.redis_url),
        loops=_periodic(store, settings, cfg, agents),
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await state.start()
        try:
            yield
        finally:
            await state.stop()

    app = FastAPI(
        title="ragloop",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        dependencies=[Depends(checked_params)],  # the input policy for every path and query value
        **_telemetry(),
    )
    app.state.service = state
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(openai_router)
    app.include_router(web_router)
    _install_errors(app)
    _install_access_log(app, metrics)
    if cfg.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cfg.cors_origins),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )

    def limit_for(scope: Scope) -> int:
        path = scope.get("path", "")
        if scope.get("method") == "POST" and path.startswith("/v1/collections/") and path.endswith("/documents"):
            return cfg.max_upload_bytes * cfg.max_upload_files + UPLOAD_OVERHEAD
        return cfg.max_request_bytes

    app.add_middleware(BodySizeLimit, limit_for=limit_for)
    return app


def _telemetry() -> dict[str, Any]:
    """FastAPI's own request spans (HTTP semantic conventions, W3C `traceparent` in, the route and status
    out) on ragloop's tracer provider when tracing is on (`ragloop.tracing`), and off otherwise, even when
    a global provider exists (one process, one decision). Its metrics and logs stay off: the service has
    Prometheus metrics and its own logs. FastAPI releases before 0.165 have no `telemetry`: no request span."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    on = tracing.configure()
    return {
        "telemetry": {
            "tracing": on,
            "tracer_provider": tracing.tracer_provider(),
            "metrics": False,
            "logs": False,
            "operation_spans": False,
        }
    }


REGRESSION_POLL_S = 300.0


def _periodic(
    store: Store, settings: Settings, cfg: ServiceConfig, agents: AgentManager, clock: Clock = SYSTEM_CLOCK
) -> PeriodicTasks:
    """Experiment aggregation, the auto-experiment step and the activation audit (on by default), the
    scheduled regression run (off by default; `RAGLOOP_REGRESSION_INTERVAL_S=86400` for nightly,
    "nightly" read on the loop's `clock`), the evaluator-drift rubric check, and the nightly golden-set
    nomination (off by default)."""
    from ragloop.experiments.activation_audit import audit_activations
    from ragloop.experiments.aggregation import aggregate_running
    from ragloop.experiments.auto import AutoOutcome, auto_experiment_step, golden_check
    from ragloop.experiments.drift import rubric_check, rubric_due
    from ragloop.experiments.golden_review import NightlyNomination
    from ragloop.experiments.golden_versions import target_mix
    from ragloop.experiments.index_variants import prune_index_variants
    from ragloop.experiments.promotion import MaintenanceWindow
    from ragloop.experiments.regression import regression_due, run_regression
    from ragloop.experiments.runtime import build_answerer, golden_smoke_test
    from ragloop.experiments.versions import version_config

    window = MaintenanceWindow.parse(cfg.promotion_window)
    smoke = golden_smoke_test(store, settings, cfg.collection)
    tasks = PeriodicTasks()

    def aggregate() -> None:
        if aggregate_running(store, clock, smoke_test=smoke, window=window):
            agents.invalidate()

    def regress() -> None:
        if not regression_due(store, clock.now(), cfg.regression_interval_s):
            return
        version, config = agents.active()
        run_regression(
            store,
            build_answerer(settings, cfg.collection, config, calls=store.model_calls),
            pipeline_version=version,
            default_webhook_url=cfg.regression_webhook_url,
            clock=clock,
        )
        agents.invalidate()

    auto_settings = cfg.auto_experiments
    check = golden_check(
        store,
        lambda version: build_answerer(
            settings, cfg.collection, version_config(store, version), calls=store.model_calls
        ),
        threshold=auto_settings.golden_threshold,
        limit=auto_settings.golden_limit,
    )

    def auto_experiment() -> None:
        step = auto_experiment_step(store, check, settings=auto_settings, clock=clock, window=window)
        if step.outcome is AutoOutcome.PROMOTED:
            agents.invalidate()
        if step.outcome not in (AutoOutcome.BUSY, AutoOutcome.IDLE, AutoOutcome.AWAITING_WINDOW):
            log.info("auto-experiment: %s", step.to_json())

    tasks.add("experiment-aggregation", cfg.experiment_aggregate_interval_s, aggregate)

    def activation_audit() -> None:
        for entry in audit_activations(store, clock.now, window_s=cfg.activation_audit_window_s):
            log.info("activation audit: %s %s", entry.refers_to, entry.actual_delta)

    tasks.add("activation-audit", cfg.activation_audit_interval_s, activation_audit)
    tasks.add("auto-experiment", cfg.auto_experiment_interval_s, auto_experiment)
    # polled (at most every 5 min), run when the store's last run is an interval old on the clock
    poll = min(cfg.regression_interval_s, REGRESSION_POLL_S) if cfg.regression_interval_s > 0 else 0.0
    tasks.add("golden-regression", poll, regress)

    def rubric() -> None:
        if rubric_due(store, clock.now(), cfg.rubric_check_interval_s):
            rubric_check(store, clock.now(), window_s=cfg.rubric_check_interval_s, actor="scheduler")

    every = min(cfg.rubric_check_interval_s, 3600.0) if cfg.rubric_check_interval_s > 0 else 0.0
    tasks.add("rubric-check", every, rubric)

    nightly = NightlyNomination(store, clock=clock, hour_utc=cfg.golden_nomination_hour)
    target_mix(cfg.golden_target_mix)  # a malformed RAGLOOP_GOLDEN_TARGET_MIX fails here, at start-up

    def nominate() -> None:
        report = nightly.tick()  # at most once per UTC day of the loop's clock
        if report is not None:
            log.info("golden nomination: %d nominated of %d considered", len(report.nominated), report.considered)

    tasks.add("golden-nomination", cfg.golden_nomination_check_s, nominate)

    def prune_variants() -> None:
        dropped = prune_index_variants(store, settings, cfg.collection)
        if dropped:
            log.info("index variants dropped (no live version serves from them): %s", ", ".join(dropped))

    tasks.add("index-variant-prune", cfg.variant_prune_interval_s, prune_variants)
    return tasks


def _openai_path(request: Request) -> bool:
    return request.url.path.startswith(OPENAI_PATHS)


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            ctx: dict[str, Any] = next((e.get("ctx", {}) for e in errors if e.get("type") == "json_invalid"), {})
            message = f"the request body is not valid JSON ({ctx.get('error', 'parse error')})"
            status = 400
        else:
            message = "; ".join(_describe(e) for e in errors)
            status = 422
        if _openai_path(request):
            return JSONResponse(error_body(message, "invalid_request_error"), status_code=status)
        return JSONResponse({"detail": message, "errors": _plain(errors)}, status_code=status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if _openai_path(request):
            type_ = exc.type_ if isinstance(exc, OpenAIError) else _openai_type(exc.status_code)
            code = exc.code if isinstance(exc, OpenAIError) else None
            return JSONResponse(error_body(str(exc.detail), type_, code), status_code=exc.status_code, headers=headers)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(NotFoundError)
    async def not_found(request: Request, exc: NotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        rid = getattr(request.state, "request_id", "")
        log.error("unhandled error on %s %s [%s]", request.method, request.url.path, rid, exc_info=exc)
        message = f"internal error (request {rid})"
        if _openai_path(request):
            return JSONResponse(error_body(message, "server_error"), status_code=500)
        return JSONResponse({"detail": message}, status_code=500)


def _openai_type(status: int) -> str:
    return {
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
    }.get(status, "invalid_request_error" if status < 500 else "server_error")


def _describe(err: Any) -> str:
    loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
    return f"{loc}: {err.get('msg', 'invalid')}"


def _plain(errors: Any) -> list[dict[str, Any]]:
    out = []
    for e in errors:
        out.append(
            {"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
        )
    return out


def _install_access_log(app: FastAPI, metrics: ServiceMetrics) -> None:
    @app.middleware("http")
    async def access_log(request: Request, call_next: Any) -> Any:
        rid = uuid.uuid4().hex[:12]
        request.state.request_id = rid
        tracing.annotate_current({"ragloop.request_id": rid})  # the request span, findable from the log line
        start = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            response.headers["X-Request-ID"] = rid
            return response
        finally:
            elapsed = time.perf_counter() - start
            route = request.scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            metrics.requests.labels(request.method, template, str(status)).inc()
            metrics.latency.labels(request.method, template).observe(elapsed)
            access.info(
                "%s %s %d %.1fms key=%s rid=%s",
                request.method,
                template,
                status,
                elapsed * 1000,
                getattr(request.state, "key_id", "-"),
                rid,
            )
