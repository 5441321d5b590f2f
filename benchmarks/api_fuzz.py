"""schemathesis against a real `ragloop serve`, on SQLite and on PostgreSQL, in one run.

    .venv/bin/python benchmarks/api_fuzz.py [--max-time 240] [--engines sqlite,postgresql] [--workers 2]

For each engine: a fresh `RAGLOOP_HOME` under `benchmarks/.home/fuzz/`, two SQuAD 2.0 dev articles
ingested with the default offline pipeline (MiniLM + BM25; the embedding cache is shared with the
other benchmarks), `ragloop serve` on a free loopback port (PostgreSQL: a fresh database `ragfuzz`
on 127.0.0.1:5432, dropped afterwards), an admin key whose rate limit cannot cut the run short, and
`schemathesis run /openapi.json` with every phase (examples, coverage, fuzzing, stateful), NUL bytes
allowed in generated strings, and the `not_a_server_error` check (any 5xx fails); the per-address
limit on refused keys is off for the run (schemathesis sends wrong keys too). Reported per
engine: operations, test cases, 5xx (with the operations that gave them), and how many responses
were 429 (a run that mostly hits the limiter tests nothing).

Writes `benchmarks/results/api_fuzz.{json,md}`. Everything stops by itself: schemathesis has a
time budget and the server is terminated afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import BENCH_HOME, REPO, machine, print_table, write_results

BIN = Path(sys.executable).parent
FUZZ_HOME = BENCH_HOME / "fuzz"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_DB = "ragfuzz"
SQUAD = Path(os.environ.get("RAGLOOP_DATASETS", REPO.parent / "shared" / "datasets")) / "squad2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env(home: Path, db_url: str | None) -> dict[str, str]:
    out = dict(os.environ, RAGLOOP_HOME=str(home), HF_HUB_OFFLINE="1", RAGLOOP_CACHE_DIR=str(BENCH_HOME / "cache"))
    out.pop("RAGLOOP_DATABASE_URL", None)
    # schemathesis also sends wrong keys; the per-address limit on refused keys would then answer
    # the good key 429 too and cut the run short: off for this run only
    out["RAGLOOP_AUTH_FAILURES_PER_MINUTE"] = "0"
    if db_url:
        out["RAGLOOP_DATABASE_URL"] = db_url
    return out


def psql(sql: str) -> None:
    subprocess.run(["psql", PG_ADMIN, "-qc", sql], check=True, capture_output=True)


def write_docs(dest: Path, articles: int = 2) -> int:
    data = json.loads((SQUAD / "squad2-dev-12articles.json").read_text(encoding="utf-8"))
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    for a in data["data"][:articles]:
        for i, p in enumerate(a["paragraphs"]):
            text = f"# {a['title']} ({i})\n\n{p['context']}\n"
            (dest / f"{a['title']}_p{i:03d}.md").write_text(text, encoding="utf-8")
            n += 1
    return n


def wait_healthy(base: str, proc: subprocess.Popen[bytes], seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ragloop serve exited {proc.returncode}")
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1)
            return
        except Exception:
            time.sleep(0.5)
    raise RuntimeError("ragloop serve did not become healthy")


def summarise(ndjson: Path, output: str) -> dict[str, Any]:
    """Counts from schemathesis' NDJSON event stream (every scenario's recorded responses) and the
    operations it tested, from its summary."""
    tested = re.search(r"Tested: (\d+)", output)
    cases = 0
    statuses: dict[str, int] = {}
    server_errors: dict[str, int] = {}
    for line in ndjson.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        finished = event.get("ScenarioFinished")
        if not finished:
            continue
        cases += len(finished.get("recorder", {}).get("cases", {}))
        for interactions in finished.get("recorder", {}).get("interactions", {}).values():
            response = interactions.get("response") or {}
            code = response.get("status_code")
            if code is None:
                continue
            statuses[str(code)] = statuses.get(str(code), 0) + 1
            if int(code) >= 500:
                req = interactions.get("request", {})
                key = f"{req.get('method', '?')} {re.sub(r'[?].*', '', str(req.get('uri', '')))}"
                server_errors[key] = server_errors.get(key, 0) + 1
    return {
        "operations": int(tested.group(1)) if tested else None,
        "test_cases": cases,
        "responses": sum(statuses.values()),
        "status_counts": dict(sorted(statuses.items())),
        "server_errors": sum(server_errors.values()),
        "server_errors_by_request": server_errors,
        "rate_limited": statuses.get("429", 0),
    }


def fuzz(engine: str, max_time: int, workers: int, articles: int) -> dict[str, Any]:
    home = FUZZ_HOME / engine
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    db_url = None
    if engine == "postgresql":
        psql(f"DROP DATABASE IF EXISTS {PG_DB}")
        psql(f"CREATE DATABASE {PG_DB}")
        db_url = f"postgresql://postgres@127.0.0.1:5432/{PG_DB}"
    e = env(home, db_url)
    try:
        docs = write_docs(home / "docs", articles)
        ingest = [str(BIN / "ragloop"), "ingest", str(home / "docs"), "--collection", "default"]
        subprocess.run(ingest, env=e, check=True)
        out = subprocess.run(
            [str(BIN / "ragloop"), "keys", "create", "--role", "admin", "--rate-limit", "100000000", "--json"],
            env=e,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        key = json.loads(out[out.find("{") :])["key"]
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with open(home / "serve.log", "wb") as log:
            server = subprocess.Popen(
                [str(BIN / "ragloop"), "serve", "--port", str(port), "--log-level", "warning"],
                env=e,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_healthy(base, server)
            report = home / "events.ndjson"
            t0 = time.perf_counter()
            run = subprocess.run(
                [
                    str(BIN / "schemathesis"),
                    "run",
                    f"{base}/openapi.json",
                    "-H",
                    f"Authorization: Bearer {key}",
                    "-c",
                    "not_a_server_error",
                    "--max-time",
                    str(max_time),
                    "-w",
                    str(workers),
                    "--seed",
                    "1",
                    "--generation-database",
                    "none",
                    "--generation-allow-x00",
                    "true",
                    "--request-timeout",
                    "60",
                    "--report",
                    "ndjson",
                    "--report-ndjson-path",
                    str(report),
                    "--no-color",
                ],
                env=e,
                capture_output=True,
                text=True,
            )
            seconds = time.perf_counter() - t0
            (home / "schemathesis.log").write_text(run.stdout + run.stderr, encoding="utf-8")
            alive = server.poll() is None
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
        summary = summarise(report, run.stdout)
        return {
            "engine": engine,
            "documents": docs,
            "seconds": round(seconds, 1),
            "exit_code": run.returncode,
            "server_alive_after": alive,
            **summary,
            "tail": (run.stdout + run.stderr)[-1500:],
        }
    finally:
        if engine == "postgresql":
            psql(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-time", type=int, default=240, help="schemathesis time budget per engine, seconds")
    ap.add_argument("--engines", default="sqlite,postgresql")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--articles", type=int, default=2, help="SQuAD 2.0 dev articles ingested")
    args = ap.parse_args()
    version = subprocess.run([str(BIN / "schemathesis"), "--version"], capture_output=True, text=True).stdout.strip()
    runs = [fuzz(engine, args.max_time, args.workers, args.articles) for engine in args.engines.split(",")]
    rows = [
        [
            r["engine"],
            r["operations"],
            r["test_cases"],
            r["responses"],
            r["rate_limited"],
            r["server_errors"],
            ", ".join(f"{k} ×{v}" for k, v in r["server_errors_by_request"].items()) or "—",
        ]
        for r in runs
    ]
    md = f"# schemathesis against `ragloop serve` ({version})\n\n"
    md += f"Command: `.venv/bin/python benchmarks/api_fuzz.py --max-time {args.max_time}`; all phases, NUL allowed, "
    md += "check `not_a_server_error`, admin key with an unbounded rate limit.\n\n"
    md += print_table(
        "Per engine", ["engine", "operations", "test cases", "responses", "429", "5xx", "5xx requests"], rows
    )
    write_results("api_fuzz", {"schemathesis": version, "machine": machine(), "runs": runs}, md)


if __name__ == "__main__":
    main()
