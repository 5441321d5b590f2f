"""Which arms a simulation runs, and running them: the CLI's `ragloop improve simulate` and
`benchmarks/self_improvement.py` both build a plan here and call `simulate`.

- **quick** (CI, the contract check; a few minutes): SQuAD 2.0, the first 5 paragraphs of every
  article (~570 questions; the same article split), 2 simulated days of 0.6 real minutes, 50
  graded turns a day, 60 held-out items, 20 golden entries, two arms from today's defaults run side
  by side: 10% and 50% of ratings flipped (the direction of outcomes 1 and 3).
- **full**: defaults, degraded and adversarial on each data set, 7 simulated days.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ragloop.improve.simulation.outcomes import outcomes
from ragloop.improve.simulation.run import ArmConfig, ArmResult, load_data, prepare_home, run_arm, start_config
from ragloop.improve.simulation.users import UserModel


@dataclass
class Plan:
    arms: list[ArmConfig]
    work: Path | None = None
    """Where homes, logs and held-out records go (None: a temporary directory, removed after)."""
    out_dir: Path | None = None
    name: str = "self_improvement"
    meta: dict[str, Any] = field(default_factory=dict)
    parallel: int = 1
    """Arms run at once, each with its own service and clock (most of an arm's wall time is waiting
    for its simulated day to pass, so two share a 2-core machine without slowing each other much)."""


def quick_arms(base: ArmConfig) -> list[ArmConfig]:
    q = replace(
        base,
        dataset="squad",
        paragraphs_per_article=base.paragraphs_per_article or 5,
        days=min(base.days, 2),
        day_minutes=min(base.day_minutes, 0.6),
        traffic_per_day=base.traffic_per_day or 50,
        golden=min(base.golden, 20),
        heldout=base.heldout or 60,
    )
    return [
        replace(q, label=f"quick-{q.start}", users=replace(q.users, flip_share=base.users.flip_share)),
        replace(q, label=f"quick-{q.start}-flip50", users=replace(q.users, flip_share=0.5)),
    ]


def full_arms(base: ArmConfig, datasets: Sequence[str], paths: dict[str, Path | None]) -> list[ArmConfig]:
    arms: list[ArmConfig] = []
    for ds in datasets:
        b = replace(base, dataset=ds, data_path=paths.get(ds))
        arms.append(replace(b, label=f"{ds}-defaults", start="defaults"))
        arms.append(replace(b, label=f"{ds}-degraded", start="degraded"))
        arms.append(replace(b, label=f"{ds}-adversarial", start="defaults", users=replace(b.users, flip_share=0.5)))
    return arms


POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379"
REDIS_FIRST_DB = 10
"""Arm i serves from Redis database 10 + i (0-9 left to whatever else uses the server)."""


def on_postgres(
    arms: Sequence[ArmConfig], postgres_url: str = POSTGRES_URL, redis_url: str = REDIS_URL
) -> list[ArmConfig]:
    """Each arm on its own PostgreSQL database (`ragloop_sim_<i>`, dropped and created) and Redis
    database (10 + i, flushed), so arms and reruns never share state. `postgres_url` names the server
    by a database it may connect to."""
    import redis
    from sqlalchemy.engine import make_url

    from ragloop.improve.simulation.service import fresh_postgres

    out = []
    for i, arm in enumerate(arms):
        name = f"ragloop_sim_{i}"
        url = fresh_postgres(postgres_url, name, make_url(postgres_url).set(database=name).render_as_string(False))
        arm_redis = f"{redis_url.rstrip('/')}/{REDIS_FIRST_DB + i}"
        client = redis.Redis.from_url(arm_redis)
        try:
            client.flushdb()
        finally:
            client.close()
        out.append(replace(arm, database_url=url, redis_url=arm_redis))
    return out


def single_arm(base: ArmConfig) -> list[ArmConfig]:
    flip = f"-flip{round(100 * base.users.flip_share)}"
    return [replace(base, label=f"{base.dataset}-{base.start}{flip}")]


def _run_arm(args: tuple[ArmConfig, Path, Callable[[str], None]]) -> ArmResult:
    arm, work, log = args
    return run_arm(arm, work, log=log)


def quiet(_message: str) -> None:
    """A log that says nothing (module-level, so an arm in another process can be handed it)."""


def say(message: str) -> None:
    print(message, flush=True)


def simulate(plan: Plan, *, log: Callable[[str], None] = say) -> dict[str, Any]:
    """Run every arm (`parallel` at once, each in its own process); the outcomes, cost, and (with
    `out_dir`) the result files. `log` must be a module-level function when arms run in parallel."""
    t0 = time.perf_counter()
    c0 = _cpu()
    work = plan.work or Path(tempfile.mkdtemp(prefix="ragloop-sim-"))
    try:
        for arm in plan.arms:  # each collection is ingested once, before any arm starts
            prepare_home(load_data(arm), start_config(arm.start), work)
        if plan.parallel <= 1:
            arms = [run_arm(a, work, log=log) for a in plan.arms]
        else:  # a process per arm: each measures in-process, and one interpreter lock would serialise them
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=plan.parallel, mp_context=ctx) as pool:
                arms = list(pool.map(_run_arm, [(a, work, log) for a in plan.arms]))
        result = outcomes(arms)
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        answers = sum(int(a.cost.get("answers") or 0) for a in arms)
        tier2 = sum(int(a.cost.get("tier2_jobs") or 0) for a in arms)
        result["5"] = {
            "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1),
            "cores": os.cpu_count(),
            "model_calls": sum(int(a.cost.get("model_calls") or 0) for a in arms),
            "answers_served": answers,
            "tier2_share": round(tier2 / answers, 4) if answers else None,
        }
        written: list[str] = []
        if plan.out_dir is not None:
            from ragloop.improve.simulation.report import write

            written = [str(p) for p in write(arms, result, plan.meta, plan.out_dir, plan.name)]
        return {
            "outcomes": result,
            "arms": [_summary(a) for a in arms],
            "files": written,
            "work": str(work) if plan.work else None,
        }
    finally:
        if plan.work is None:
            shutil.rmtree(work, ignore_errors=True)


def _summary(a: ArmResult) -> dict[str, Any]:
    acc = [
        None if (e := m.metrics.get("e2e_accuracy")) is None else {"day": m.day, **e.to_json()} for m in a.measurements
    ]
    return {
        "label": a.config.label,
        "dataset": a.config.dataset,
        "start": a.config.start,
        "flip_share": a.config.users.flip_share,
        "split": a.split,
        "e2e_accuracy_by_day": acc,
        "changes": len(loop_changes(a)),
        "versions": len(a.versions),
        "cost": a.cost,
    }


def loop_changes(a: ArmResult) -> list[dict[str, Any]]:
    """Audit entries the loop made (not the driver's start-up activation or the operator's golden set)."""
    return [x for x in a.audit if x["actor"] != "simulation" and x["action"] != "golden_add"]


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def default_users(rate: float, flip: float, reviews: int) -> UserModel:
    return UserModel(rate_share=rate, flip_share=flip, reviews_per_day=reviews)
