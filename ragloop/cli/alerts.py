"""`ragloop regress webhook ...`: the regression alert webhook as a stored setting (`ragloop.experiments.alerts`).

ragloop regress webhook show [--json]                       where alerts go now (redacted) and from which setting
ragloop regress webhook set URL [--secret-env VAR] [--attempts N] [--timeout S] [--json]
ragloop regress webhook clear [--json]                      back to RAGLOOP_REGRESSION_WEBHOOK_URL (or log only)
ragloop regress webhook test [--json]                       send a test alert; exit 1 when it was not delivered

The secret is read from an environment variable (never a command-line argument: it would sit in
the shell history and the process list); the URL is shown redacted, the secret never.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ragloop.cli.common import JsonOpt, emit, fail, open_store

webhook_app = typer.Typer(no_args_is_help=True, help="The regression alert webhook (a stored setting).")


@webhook_app.command("show")
def webhook_show(json_: JsonOpt = False) -> None:
    from ragloop.experiments.alerts import ENV_VAR, resolve_webhook

    with open_store() as store:
        hook = resolve_webhook(store, None, os.environ.get(ENV_VAR) or None)
    data = hook.public() if hook else {"url": None, "source": None}
    emit(
        data,
        json_,
        f"regression alerts go to {data['url']} ({data['source']})" if hook else "regression alerts: log only",
    )


@webhook_app.command("set")
def webhook_set(
    url: Annotated[str, typer.Argument(help="http(s) URL the alert JSON is POSTed to.")],
    secret_env: Annotated[
        str | None, typer.Option("--secret-env", help="Environment variable holding the HMAC signing secret.")
    ] = None,
    attempts: Annotated[int, typer.Option("--attempts", min=1, max=10)] = 3,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, max=60.0)] = 5.0,
    json_: JsonOpt = False,
) -> None:
    from ragloop.experiments.alerts import set_webhook

    secret = None
    if secret_env:
        secret = os.environ.get(secret_env)
        if not secret:
            fail(f"{secret_env} is not set")
    with open_store() as store:
        try:
            hook = set_webhook(store, url, secret=secret, attempts=attempts, timeout_s=timeout, actor="cli")
        except ValueError as exc:
            fail(str(exc))
    emit(hook.public(), json_, f"regression alerts now go to {hook.public()['url']}")


@webhook_app.command("clear")
def webhook_clear(json_: JsonOpt = False) -> None:
    from ragloop.experiments.alerts import clear_webhook

    with open_store() as store:
        removed = clear_webhook(store, actor="cli")
    emit({"cleared": removed}, json_, "stored webhook cleared" if removed else "no stored webhook")


@webhook_app.command("test")
def webhook_test(json_: JsonOpt = False) -> None:
    """Send a test alert to the configured webhook (retried like a real one)."""
    from ragloop.experiments.alerts import ENV_VAR, deliver, resolve_webhook

    with open_store() as store:
        hook = resolve_webhook(store, None, os.environ.get(ENV_VAR) or None)
    if hook is None:
        fail("no webhook configured (ragloop regress webhook set URL)")
    res = deliver(hook, "ragloop test alert: the regression webhook works", {"test": True})
    emit(res.to_json(), json_, f"{'delivered' if res.delivered else 'NOT delivered'} to {res.url} "
         f"after {res.attempts} attempt(s){'' if res.delivered else f': {res.error}'}")  # fmt: skip
    if not res.delivered:
        raise typer.Exit(1)
