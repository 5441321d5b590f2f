"""The served system under simulation: `ragloop serve` on a free loopback port and `ragloop worker`
processes, started as a deployment would start them (the same executables, configured only by the
environment), all on one compressed clock (`RAGLOOP_CLOCK=scaled:...`), plus the HTTP client a user
and a reviewer use. Nothing here reaches into the server's memory: what the simulation knows of the
service it learns through the API, or from the store the service writes (as an operator would).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ragloop.store import Store


class ServiceError(RuntimeError):
    """The served system did not start or answered with an error the simulation cannot go on from."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServiceSpec:
    home: Path
    collection: str
    clock_spec: str
    database_url: str | None = None
    redis_url: str | None = None
    workers: int = 1
    env: dict[str, str] = field(default_factory=dict)
    """Service settings (`RAGLOOP_*`) the deployment sets: windows on the simulated clock and so on."""

    def environ(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            RAGLOOP_HOME=str(self.home),
            RAGLOOP_CLOCK=self.clock_spec,
            RAGLOOP_COLLECTION=self.collection,
            HF_HUB_OFFLINE="1",
            RAGLOOP_THREADS="1",
        )
        if self.database_url:
            env["RAGLOOP_DATABASE_URL"] = self.database_url
        if self.redis_url:
            env["RAGLOOP_REDIS_URL"] = self.redis_url
        env.update(self.env)
        return env


def _ragloop() -> list[str]:
    exe = Path(sys.executable).with_name("ragloop")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ragloop"]


class ServedSystem:
    """`with ServedSystem(spec) as svc:` starts the server and workers; `svc.user` / `svc.admin` are clients."""

    def __init__(self, spec: ServiceSpec, *, user_key: str, admin_key: str, log_dir: Path) -> None:
        self.spec = spec
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_dir = log_dir
        self.user = httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {user_key}"}, timeout=120)
        self.admin = httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {admin_key}"}, timeout=120)

    def _start(self, name: str, args: list[str]) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [*_ragloop(), *args],
            env=self.spec.environ(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)

    def __enter__(self) -> ServedSystem:
        try:
            self._start(
                "serve",
                ["serve", "--host", "127.0.0.1", "--port", str(self.port), "--collection", self.spec.collection]
                + ["--no-worker"] * (self.spec.workers > 0)
                + ["--log-level", "warning"],
            )
            for n in range(self.spec.workers):
                self._start(f"worker-{n}", ["worker", "--log-level", "warning"])
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise ServiceError(f"a served process exited {p.returncode} at start-up (logs: {self.log_dir})")
            try:
                if self.user.get("/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise ServiceError(f"ragloop serve not ready after {timeout_s:.0f} s (logs: {self.log_dir})")

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.procs.clear()
        self.user.close()
        self.admin.close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the API as a client uses it

    def ask(self, question: str, session_id: str) -> dict[str, Any]:
        body = {"question": question, "session_id": session_id, "collection": self.spec.collection}
        return self._json(self.user.post("/v1/query", json=body))

    def feedback(self, answer_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._json(self.user.post(f"/v1/answers/{answer_id}/feedback", json=dict(body)))

    def add_golden(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._json(self.admin.post("/v1/golden", json=dict(body)))

    def review_queue(self) -> list[dict[str, Any]]:
        out = self._json(self.admin.get("/v1/review"))
        return list(out) if isinstance(out, list) else []

    def review(self, answer_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._json(self.admin.post(f"/v1/review/{answer_id}", json=dict(body)))

    def _json(self, resp: httpx.Response) -> Any:
        if resp.status_code >= 400:
            raise ServiceError(f"{resp.request.method} {resp.request.url.path}: {resp.status_code} {resp.text[:300]}")
        return resp.json()


def issue_keys(store: Store) -> tuple[str, str]:
    """A user key (the simulated users) and an admin key (the simulated reviewer), with the service's
    own rate limit (the replay asks faster than a person)."""
    user = store.api_keys.create_api_key("user", name="simulated users", rate_limit_per_minute=None)
    admin = store.api_keys.create_api_key("admin", name="simulated reviewer", rate_limit_per_minute=None)
    return user.key, admin.key


def fresh_postgres(admin_url: str, name: str, url: str) -> str:
    """Drop and create database `name` (an arm's own, so arms and reruns never share state)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return url
