"""`ragloop serve`, `ragloop worker`, `ragloop keys ...` and `ragloop db upgrade`: the service from the
command line. Heavy imports (FastAPI, uvicorn) happen inside the commands."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from ragloop.cli.common import ConfigOpt, JsonOpt, console, fail, out, print_json, settings

if TYPE_CHECKING:
    from ragloop.config.settings import Settings
    from ragloop.store import Store

keys_app = typer.Typer(help="API keys: create (shown once), list, revoke.", no_args_is_help=True)
db_app = typer.Typer(help="The service database (SQLite by default, PostgreSQL by RAGLOOP_DATABASE_URL).")

UrlOpt = Annotated[
    str | None, typer.Option("--database-url", help="Default: RAGLOOP_DATABASE_URL, else RAGLOOP_HOME/ragloop.db.")
]


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(worker)
    app.add_typer(keys_app, name="keys")
    app.add_typer(db_app, name="db")


def _logging(level: str) -> None:
    from ragloop.service.auth import install_log_redaction

    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_redaction()


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _store(url: str | None) -> Store:
    from ragloop.store import Store

    try:
        return Store.open(url)
    except Exception as exc:
        fail(f"cannot open the database: {_short(exc)}")


def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    config: ConfigOpt = None,
    collection: Annotated[
        str | None, typer.Option("--collection", "-c", help="Default collection (default: `default`).")
    ] = None,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="No in-process evaluation worker (run `ragloop worker`s).")
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
    database_url: UrlOpt = None,
) -> None:
    """Serve the HTTP API (OpenAPI at /docs and /openapi.json) with an embedded evaluation worker."""
    import uvicorn

    from ragloop.cli.common import pipeline_config
    from ragloop.service import ServiceConfig, create_app

    _logging(log_level)
    try:
        overrides = {"collection": collection} if collection else {}
        cfg = ServiceConfig.from_env(None, **overrides)
        app = create_app(
            settings(),
            database_url,
            config=pipeline_config(config) if config else None,
            service_config=cfg,
            worker=False if no_worker else None,
        )
    except ValueError as exc:
        fail(str(exc))
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=15,
        server_header=False,
    )


def worker(
    lease_seconds: Annotated[float, typer.Option("--lease-seconds", help="Lease per claimed job.")] = 60.0,
    poll_interval: Annotated[float, typer.Option("--poll-interval", help="Seconds between polls when idle.")] = 0.5,
    drain: Annotated[bool, typer.Option("--drain", help="Exit once no job is due.")] = False,
    max_jobs: Annotated[int | None, typer.Option("--max-jobs", help="Exit after this many jobs.")] = None,
    job_delay: Annotated[
        float, typer.Option("--job-delay", help="Wait this long after claiming each job (fault-injection tests).")
    ] = 0.0,
    no_judge: Annotated[bool, typer.Option("--no-judge", help="Tier 1 only (leave tier-2 jobs to others).")] = False,
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
    embed_only: Annotated[
        bool, typer.Option("--embed-only", help="Only embed ingest slices (no evaluation; no store needed).")
    ] = False,
    database_url: UrlOpt = None,
) -> None:
    """Evaluate answers from the durable queue (tier 1 on every answer, tier 2 where routed).

    With RAGLOOP_DISTRIBUTED_EMBEDDING=on and a shared embedding cache (RAGLOOP_EMBEDDING_CACHE_URL,
    or a PostgreSQL RAGLOOP_DATABASE_URL), a thread also embeds the slices ingests put on the shared
    queue (`ragloop.models.shared_cache`); --embed-only runs that thread alone.
    Runs until SIGTERM/SIGINT (the job in hand finishes first), or with --drain until nothing is due.
    Any number of workers can share one database."""
    import asyncio

    stopping = threading.Event()
    stopper: list[Callable[[], None]] = []

    def stop(_sig: int, _frame: object) -> None:
        console.print("stopping after the current job…", highlight=False)
        stopping.set()
        for fn in stopper:
            fn()

    # handle SIGTERM/SIGINT from the start: a signal during start-up ends the worker cleanly too
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    _logging(log_level)
    s = settings()
    embedding = _embedding_thread(
        s, stopping, embed_only, lease_s=lease_seconds, poll_s=poll_interval, delay_s=job_delay
    )
    if embed_only:  # before the evaluation side's imports: an embedding-only worker starts in a second
        embedding.join()
        return

    from ragloop.improve.judge import make_judge
    from ragloop.improve.remediate import current_config
    from ragloop.models.scoring import make_scorer
    from ragloop.service import EvaluationWorker, ServiceConfig
    from ragloop.service.app import diagnosis_engine, remediation_pass

    try:
        cfg = ServiceConfig.from_env(lease_seconds=lease_seconds, poll_interval_s=poll_interval)
    except ValueError as exc:
        fail(str(exc))
    store = _store(database_url)
    judge = make_judge(cfg.judge, s, calls=store.model_calls) if cfg.judge and not no_judge else None
    support = make_scorer(cfg.heuristic_support, s, calls=store.model_calls) if cfg.heuristic_support else None
    w = EvaluationWorker(
        store,
        cfg,
        judge=judge,
        support_scorer=support,
        job_delay_s=job_delay,
        diagnosis=diagnosis_engine(store, s, cfg),
        remediation=remediation_pass(store, s, cfg, lambda: current_config(store)),
    )
    stopper.append(w.stop)
    if stopping.is_set():
        w.stop()
    console.print(f"worker {w.worker_id} on {store.db.url} (pid {os.getpid()})", highlight=False)
    try:
        done = asyncio.run(w.run(drain=drain, max_jobs=max_jobs))
    finally:
        w.tier1_cache.close()
        store.close()
    stopping.set()
    embedding.join()
    console.print(f"worker {w.worker_id}: {done} jobs", highlight=False)


def _embedding_thread(
    s: Settings, stopping: threading.Event, required: bool, *, lease_s: float, poll_s: float, delay_s: float
) -> threading.Thread:
    """The slice-embedding loop in a thread (not started when distributed embedding is off, and
    then `join` returns at once); `required` (--embed-only) fails when it cannot run. It shares the
    evaluation loop's lease, poll interval and fault-injection delay."""
    from ragloop.models import make_model
    from ragloop.models.shared_cache import SharedEmbeddingStore, work_slices
    from ragloop.service.worker import default_worker_id

    thread = threading.Thread(target=lambda: None)
    if not (s.distributed_embedding and s.embedding_cache_url):
        if required:
            fail("--embed-only needs RAGLOOP_DISTRIBUTED_EMBEDDING=on and a PostgreSQL RAGLOOP_EMBEDDING_CACHE_URL")
        thread.start()
        return thread
    shared = SharedEmbeddingStore.for_url(s.embedding_cache_url)
    worker_id = f"embed:{default_worker_id()}"

    def run() -> None:
        n = work_slices(
            shared,
            lambda m, t: make_model(m, s, max_tokens=t),
            stopping,
            worker_id=worker_id,
            lease_s=lease_s,
            poll_s=poll_s,
            delay_s=delay_s,
        )
        console.print(f"embedding worker {worker_id}: {n} slices", highlight=False)

    console.print(f"embedding worker {worker_id} (pid {os.getpid()})", highlight=False)
    thread = threading.Thread(target=run, name="ragloop-embed-worker", daemon=True)
    thread.start()
    return thread


@keys_app.command("create")
def keys_create(
    role: Annotated[str, typer.Option("--role", help="user or admin.")] = "user",
    name: Annotated[str | None, typer.Option("--name", help="A label for the key.")] = None,
    rate_limit: Annotated[
        int | None, typer.Option("--rate-limit", help="Requests per minute (default 60; 0: the service default).")
    ] = 60,
    json_: JsonOpt = False,
    database_url: UrlOpt = None,
) -> None:
    """Create an API key. The key is printed once and stored only as a hash."""
    if role not in ("user", "admin"):
        fail(f"--role must be user or admin, not {role!r}")
    if rate_limit is not None and rate_limit < 0:
        fail("--rate-limit must be positive (or 0 for the service default)")
    with _store(database_url) as store:
        issued = store.api_keys.create_api_key(role, name=name, rate_limit_per_minute=rate_limit or None)
    if json_:
        print_json(
            {
                "key": issued.key,
                "key_id": issued.record.key_id,
                "role": issued.record.role,
                "rate_limit_per_minute": issued.record.rate_limit_per_minute,
            }
        )
    else:
        console.print(f"{role} key {issued.record.key_id} created; it is shown only now:", highlight=False)
        out.print(issued.key, highlight=False)


@keys_app.command("list")
def keys_list(
    all_: Annotated[bool, typer.Option("--all", help="Include revoked keys.")] = False,
    json_: JsonOpt = False,
    database_url: UrlOpt = None,
) -> None:
    """List keys (ids and roles; never the keys themselves)."""
    with _store(database_url) as store:
        rows = store.api_keys.list_keys(include_revoked=all_)
    data = [
        {
            "key_id": r.key_id,
            "role": r.role,
            "name": r.name,
            "rate_limit_per_minute": r.rate_limit_per_minute,
            "created_at": r.created_at.isoformat(),
            "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None,
        }
        for r in rows
    ]
    if json_:
        print_json(data)
        return
    for d in data:
        out.print(
            f"{d['key_id']}  {d['role']:<5}  {d['name'] or '-'}  {d['rate_limit_per_minute'] or 'default'}/min"
            + (f"  revoked {d['revoked_at']}" if d["revoked_at"] else ""),
            highlight=False,
        )


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (the hex part after rlk_).")],
    database_url: UrlOpt = None,
) -> None:
    """Revoke a key: it stops working at once."""
    with _store(database_url) as store:
        if not store.api_keys.revoke(key_id):
            fail(f"no active key {key_id!r}")
    console.print(f"key {key_id} revoked", highlight=False)


@db_app.command("upgrade")
def db_upgrade(database_url: UrlOpt = None, json_: JsonOpt = False) -> None:
    """Create or migrate the service tables to the current schema."""
    from ragloop.store import current_revision, default_database_url, head_revision, make_engine, upgrade

    url = database_url or default_database_url(settings())
    try:
        engine = make_engine(url)
        before = current_revision(engine)
        upgrade(engine)
        after = current_revision(engine)
        shown = engine.url.render_as_string(hide_password=True)
        engine.dispose()
    except Exception as exc:
        fail(
            f"cannot upgrade {url.split('@')[-1]}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        )
    if json_:
        print_json({"database": shown, "from": before, "to": after, "head": head_revision()})
    else:
        console.print(f"{shown}: {before or 'empty'} -> {after}", highlight=False)
