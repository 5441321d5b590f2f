"""How long a refused API key takes, by why it is refused: does the failure time tell an attacker
whether a key id exists?

Four cases against `GET /v1/models` of an in-process app (httpx's ASGI transport, no network):
`malformed` (not shaped like a key), `unknown` (well formed, no such key id), `wrong_secret` (a real
key id with a wrong secret) and `valid` (for reference: a key that works). Each round sends one
request of every case in a shuffled order (so drift and noise from other processes fall on all
cases alike); medians and quartiles over `--n` rounds, after `--warmup` rounds.

    .venv/bin/python benchmarks/auth_timing.py --label after            # SQLite
    .venv/bin/python benchmarks/auth_timing.py --label after --postgres postgresql://postgres@127.0.0.1:5432/test

Results: `benchmarks/results/auth_timing.json` (one entry per label and engine; earlier entries
are kept) and `.md`. The failed-attempt limiter is set high here so that it does not cut the run short.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import statistics
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, machine, markdown_table, write_results

CASES = ("malformed", "unknown", "wrong_secret", "valid")


def _service_config() -> Any:
    from ragloop.service import ServiceConfig

    wanted = {
        "inprocess_worker": False,
        "judge": None,
        "heuristic_support": None,
        "rate_limit_per_minute": 10_000_000,
        "auth_failures_per_minute": 10_000_000,
    }
    known = {f.name for f in fields(ServiceConfig)}
    return ServiceConfig(**{k: v for k, v in wanted.items() if k in known})


async def measure(store_url: str, home: Path, n: int, warmup: int, seed: int) -> dict[str, list[float]]:
    import httpx

    from ragloop.config import Settings
    from ragloop.service import create_app
    from ragloop.store import Store

    store = Store.open(store_url)
    try:
        valid = store.api_keys.create_api_key("user", name="bench", rate_limit_per_minute=None).key
        key_id = valid.split("_")[1]
        keys = {
            "malformed": "not-a-key-" + secrets.token_urlsafe(32),
            "unknown": f"rlk_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}",
            "wrong_secret": f"rlk_{key_id}_{secrets.token_urlsafe(32)}",
            "valid": valid,
        }
        app = create_app(Settings(home=home), store=store, service_config=_service_config(), worker=False)
        times: dict[str, list[float]] = {c: [] for c in CASES}
        rng = random.Random(seed)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench.test") as client:
                for i in range(warmup + n):
                    order = list(CASES)
                    rng.shuffle(order)
                    for case in order:
                        headers = {"Authorization": f"Bearer {keys[case]}"}
                        t0 = time.perf_counter()
                        r = await client.get("/v1/models", headers=headers)
                        elapsed = time.perf_counter() - t0
                        expected = 200 if case == "valid" else 401
                        if r.status_code != expected:
                            raise SystemExit(f"{case}: expected {expected}, got {r.status_code} {r.text[:200]}")
                        if i >= warmup:
                            times[case].append(elapsed)
        return times
    finally:
        store.close()


def summarise(times: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    out = {}
    for case, xs in times.items():
        ms = sorted(x * 1000 for x in xs)
        q = statistics.quantiles(ms, n=4)
        out[case] = {"n": len(ms), "median_ms": round(q[1], 3), "p25_ms": round(q[0], 3), "p75_ms": round(q[2], 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", required=True, help="name of this run in the results file (e.g. before, after)")
    ap.add_argument("--n", type=int, default=300, help="measured rounds (one request per case each)")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--postgres", help="a PostgreSQL URL (a fresh schema is made and dropped); default SQLite")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ragloop-auth-") as tmp:
        home = Path(tmp)
        if args.postgres:
            engine, url, cleanup = "postgresql", *_pg_schema(args.postgres)
        else:
            engine, url, cleanup = "sqlite", f"sqlite:///{home / 'ragloop.db'}", lambda: None
        try:
            times = asyncio.run(measure(url, home, args.n, args.warmup, args.seed))
        finally:
            cleanup()
    summary = summarise(times)

    path = RESULTS_DIR / "auth_timing.json"
    runs: dict[str, Any] = json.loads(path.read_text())["runs"] if path.exists() else {}
    runs[f"{args.label}/{engine}"] = {"cases": summary, "machine": machine(), "rounds": args.n}
    rows = []
    for name, run in sorted(runs.items()):
        c = run["cases"]
        spread = max(c[k]["median_ms"] for k in CASES[:3]) - min(c[k]["median_ms"] for k in CASES[:3])
        rows.append([name, run["rounds"], *(c[k]["median_ms"] for k in CASES), round(spread, 3)])
    headers = ["run/engine", "rounds", *(f"{c} p50 ms" for c in CASES), "spread of refusals ms"]
    table = markdown_table(headers, rows)
    print(f"\n{table}\n")
    detail = "\n".join(
        f"- {name}: "
        + ", ".join(f"{k} {v['median_ms']} ms (IQR {v['p25_ms']}–{v['p75_ms']})" for k, v in run["cases"].items())
        for name, run in sorted(runs.items())
    )
    md = (
        "# Refused-key timing\n\n`.venv/bin/python benchmarks/auth_timing.py --label L [--postgres URL]`: "
        "medians of `GET /v1/models` on an in-process app, one request per case per round in shuffled order. "
        "The spread of refusals is the largest minus the smallest refusal median: what a prober could read.\n\n"
        f"{table}\n\n{detail}\n"
    )
    write_results("auth_timing", {"runs": runs}, md)


def _pg_schema(admin_url: str) -> tuple[str, Any]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import NullPool

    schema = f"bench_auth_{secrets.token_hex(4)}"
    admin = create_engine(admin_url, poolclass=NullPool)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = make_url(admin_url).update_query_dict({"options": f"-csearch_path={schema}"})

    def cleanup() -> None:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()

    return url.render_as_string(hide_password=False), cleanup


if __name__ == "__main__":
    main()
