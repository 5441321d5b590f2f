"""`ragloop improve simulate`: the self-improvement simulation (`ragloop.improve.simulation`).

Starts `ragloop serve` and `ragloop worker` processes per arm on a compressed clock, replays the
traffic part of SQuAD 2.0 / MTRAG-UN through the API with simulated users and a reviewer, and
measures the held-out part before day 1 and after every simulated day.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from ragloop.cli.common import JsonOpt, console, fail, print_json
from ragloop.cli.improve import app as improve_app


def register(_root: typer.Typer) -> None:
    """The command lives under `ragloop improve`; importing this module adds it."""


@improve_app.command("simulate")
def simulate(
    quick: Annotated[
        bool, typer.Option("--quick", help="CI slice: SQuAD, 2 short days, clean and 50%-flipped arms.")
    ] = False,
    full: Annotated[bool, typer.Option("--full", help="Defaults, degraded, adversarial on each data set.")] = False,
    dataset: Annotated[str, typer.Option("--dataset", help="squad | mtrag | both.")] = "squad",
    squad: Annotated[Path | None, typer.Option("--squad", help="SQuAD 2.0 JSON (default: the shared dev set).")] = None,
    mtrag: Annotated[Path | None, typer.Option("--mtrag", help="MTRAG-UN JSONL (default: the shared dev set).")] = None,
    start: Annotated[str, typer.Option("--start", help="defaults | degraded.")] = "defaults",
    flip: Annotated[float, typer.Option("--flip", min=0.0, max=1.0, help="Share of ratings flipped.")] = 0.10,
    rate: Annotated[float, typer.Option("--rate", min=0.0, max=1.0, help="Share of answers users rate.")] = 0.30,
    reviews: Annotated[int, typer.Option("--reviews-per-day", min=0, help="Tier-3 reviews a simulated day.")] = 20,
    days: Annotated[int, typer.Option("--days", min=1, max=60)] = 7,
    day_minutes: Annotated[float, typer.Option("--day-minutes", min=0.05, help="Real minutes a simulated day.")] = 2.0,
    traffic: Annotated[
        int | None, typer.Option("--traffic-per-day", min=1, help="Graded turns a day (default: all once).")
    ] = None,
    heldout: Annotated[int | None, typer.Option("--heldout", min=2, help="Held-out items measured.")] = None,
    heldout_avoid: Annotated[
        str,
        typer.Option("--heldout-avoid", help="Sizes of the held-out samples measured before (100,300): left out."),
    ] = "",
    golden: Annotated[int, typer.Option("--golden", min=0, help="Traffic items curated into the golden set.")] = 40,
    workers: Annotated[int, typer.Option("--workers", min=0, max=8, help="`ragloop worker` processes.")] = 1,
    postgres: Annotated[
        bool,
        typer.Option(
            "--postgres",
            help="Serve each arm from its own PostgreSQL database (ragloop_sim_<i>, dropped and created) and "
            "Redis database (10 + i, flushed).",
        ),
    ] = False,
    postgres_url: Annotated[
        str | None,
        typer.Option(
            "--postgres-url",
            help="With --postgres: the server, by a database it may connect to "
            "(default postgresql+psycopg://postgres@127.0.0.1:5432/postgres).",
        ),
    ] = None,
    redis_url: Annotated[
        str | None,
        typer.Option("--redis-url", help="With --postgres: the Redis server (default redis://127.0.0.1:6379)."),
    ] = None,
    answer_check: Annotated[
        str | None,
        typer.Option("--answer-check", help="A reader the loop may turn on, e.g. llm:local:qwen2.5-coder-1.5b."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    parallel: Annotated[
        int | None, typer.Option("--parallel", min=1, max=6, help="Arms at once (default: 2 with --quick, else 1).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write Markdown + JSON + charts here.")] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Result file stem (default: quick / self_improvement).")
    ] = None,
    work: Annotated[Path | None, typer.Option("--work", help="Keep homes, logs and records here.")] = None,
    json_: JsonOpt = False,
) -> None:
    """Prove the loop: replayed traffic through the real service, measured on held-out questions."""
    from ragloop.improve.simulation.data import parse_sizes
    from ragloop.improve.simulation.plan import (
        POSTGRES_URL,
        REDIS_URL,
        Plan,
        default_users,
        full_arms,
        on_postgres,
        quick_arms,
        single_arm,
    )
    from ragloop.improve.simulation.run import ArmConfig

    if start not in ("defaults", "degraded"):
        fail("--start must be defaults or degraded")
    if not postgres and (postgres_url or redis_url):
        fail("--postgres-url and --redis-url take effect with --postgres")
    if dataset not in ("squad", "mtrag", "both"):
        fail("--dataset must be squad, mtrag or both")
    for p in (squad, mtrag):
        if p is not None and not p.is_file():
            fail(f"no such data file: {p}")
    try:
        avoid = parse_sizes(heldout_avoid)
    except ValueError as exc:
        fail(str(exc))
    base = ArmConfig(
        label="",
        dataset="squad" if dataset == "both" else dataset,
        data_path=mtrag if dataset == "mtrag" else squad,
        start=start,
        days=days,
        day_minutes=day_minutes,
        traffic_per_day=traffic,
        heldout=heldout,
        heldout_avoid=avoid,
        users=default_users(rate, flip, reviews),
        workers=workers,
        golden=golden,
        answer_check=answer_check,
        seed=seed,
    )
    if quick:
        arms = quick_arms(base)
    elif full:
        chosen = ["squad", "mtrag"] if dataset == "both" else [dataset]
        arms = full_arms(base, chosen, {"squad": squad, "mtrag": mtrag})
    else:
        chosen = ["squad", "mtrag"] if dataset == "both" else [dataset]
        arms = [
            arm
            for ds in chosen
            for arm in single_arm(replace(base, dataset=ds, data_path=mtrag if ds == "mtrag" else squad))
        ]
    if postgres:
        try:
            arms = on_postgres(arms, postgres_url or POSTGRES_URL, redis_url or REDIS_URL)
        except Exception as exc:  # unreachable or refused: say which, before any arm starts
            fail(f"--postgres: {type(exc).__name__}: {str(exc)[:300]}", code=1)
    command = "ragloop " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    meta = {"command": command, "backend": "postgres" if postgres else "sqlite"}
    plan = Plan(
        arms,
        work=work,
        out_dir=out,
        name=name or ("quick" if quick else "self_improvement"),
        meta=meta,
        parallel=parallel or (2 if quick else 1),
    )
    try:
        from ragloop.improve.simulation.plan import quiet, say
        from ragloop.improve.simulation.plan import simulate as run

        result = run(plan, log=quiet if json_ else say)
    except Exception as exc:
        fail(f"simulation failed: {type(exc).__name__}: {str(exc)[:500]}", code=1)
    if json_:
        print_json(result)
        return
    for a in result["arms"]:
        curve = ", ".join(f"d{x['day']} {x['value']:.3f}" for x in a["e2e_accuracy_by_day"] if x)
        console.print(f"{a['label']}: held-out e2e accuracy {curve}; {a['changes']} changes", highlight=False)
    console.print(f"outcomes: {result['outcomes']}", highlight=False)
