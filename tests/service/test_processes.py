"""Real processes: `ragloop serve` on 127.0.0.1 driven by the official `openai` SDK, and `ragloop worker`
processes killed with SIGKILL mid-job (every answer is still evaluated exactly once)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from sqlalchemy import select

from ragloop.retrieval.collection import Collection
from ragloop.store import Evaluation, EvaluationJob, Store, Tier
from tests.service.conftest import CFG, build_app, make_keys, open_store, running
from tests.service.test_evaluation import QUESTIONS, ask_all

RAGLOOP = Path(sys.executable).parent / "ragloop"
REPO = Path(__file__).resolve().parents[2]


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RAGLOOP_HOME=str(home),
        RAGLOOP_BLOCK_REAL_CALLS="1",
        RAGLOOP_JUDGE="lexical",
        RAGLOOP_HEURISTIC_SUPPORT="lexical",
        HF_HUB_OFFLINE="1",
    )
    env.pop("RAGLOOP_DATABASE_URL", None)
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(collection: Collection, ragloop_home: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(yaml.safe_dump(CFG.model_dump(mode="json", by_alias=True)))
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [str(RAGLOOP), "serve", "--host", "127.0.0.1", "--port", str(port), "--config", str(cfg)],
        cwd=REPO,
        env=env_for(ragloop_home),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"ragloop serve exited {proc.returncode}: {(tmp_path / 'server.log').read_text()}")
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            raise AssertionError("ragloop serve did not become healthy in 60 s")
        yield base, tmp_path / "server.log"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RAGLOOP), *args], cwd=REPO, env=env_for(home), capture_output=True, text=True, timeout=120, check=False
    )


def test_serve_with_the_openai_sdk(server: tuple[str, Path], ragloop_home: Path) -> None:
    base, log_path = server
    made = cli(ragloop_home, "keys", "create", "--role", "user", "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["key"]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)

    resp = client.chat.completions.create(
        model="ragloop", messages=[{"role": "user", "content": "When was the Zorblat Bridge completed?"}]
    )
    text = resp.choices[0].message.content or ""
    assert "1887" in text and "[1]" in text and "Sources:" in text
    extra = resp.model_extra or {}
    assert extra["citations"][0]["doc_id"] == "bridge.md" and extra["ragloop"]["answer_id"]
    assert next(m.id for m in client.models.list()) == "ragloop"

    stream = client.chat.completions.create(
        model="ragloop:default",
        messages=[{"role": "user", "content": "Who designed the Quill Tower?"}],
        stream=True,
        extra_body={"session_id": "sdk-stream"},
    )
    pieces, finish = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "Marta Quill" in "".join(pieces) and finish == "stop"

    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{base}/v1", api_key="rlk_nope", max_retries=0).models.list()

    # the plain API on the same server, and the admin refusal
    h = {"Authorization": f"Bearer {key}"}
    r = httpx.post(f"{base}/v1/query", json={"question": "How tall is the Quill Tower?", "session_id": "p"}, headers=h)
    assert r.status_code == 200 and "96 metres" in r.json()["answer"]
    assert httpx.post(f"{base}/v1/pipeline/rollback", json={}, headers=h).status_code == 403
    ready = httpx.get(f"{base}/readyz").json()
    assert ready == {"status": "ready", "checks": {"store": "ok", "index": "ok", "models": "ok"}}
    admin = cli(ragloop_home, "keys", "create", "--role", "admin", "--json")
    assert admin.returncode == 0, admin.stderr
    ah = {"Authorization": f"Bearer {json.loads(admin.stdout)['key']}"}
    # the embedded worker evaluates what was served
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metrics = httpx.get(f"{base}/metrics", headers=ah).text
        if 'ragloop_evaluation_queue_jobs{status="done",tier="heuristic"} 3.0' in metrics:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the embedded worker did not evaluate the answers:\n{metrics[-2000:]}")
    logged = log_path.read_text()
    assert key.split("_", 2)[2] not in logged


def _jobs(store: Store) -> list[EvaluationJob]:
    with store.db.transaction(write=False) as s:
        return list(s.scalars(select(EvaluationJob)))


def _start_worker(home: Path, url: str, tmp_path: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    with (tmp_path / f"{name}.log").open("w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [str(RAGLOOP), "worker", "--database-url", url, "--poll-interval", "0.05", "--log-level", "warning", *args],
            cwd=REPO,
            env=env_for(home),
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _wait_started(tmp_path: Path, name: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "worker " in (tmp_path / f"{name}.log").read_text():
            return
        assert proc.poll() is None, (tmp_path / f"{name}.log").read_text()
        time.sleep(0.05)
    raise AssertionError(f"worker {name} did not start")


@pytest.mark.anyio
async def test_worker_killed_mid_job_every_answer_evaluated_once(
    collection: Collection, ragloop_home: Path, tmp_path: Path, sqlite_url: str
) -> None:
    store = open_store(sqlite_url)
    try:
        keys = make_keys(store)
        async with running(build_app(store, worker=False)) as c:
            ids = await ask_all(c, keys.u, QUESTIONS * 2)
        # a slow worker (every claimed job is held 0.4 s), killed while it holds a lease
        victim = _start_worker(
            ragloop_home, sqlite_url, tmp_path, "victim", "--job-delay", "0.4", "--lease-seconds", "2"
        )
        held: EvaluationJob | None = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and held is None:
            jobs = _jobs(store)
            if any(j.status == "done" for j in jobs):
                held = next((j for j in jobs if j.status == "leased"), None)
            time.sleep(0.02)
        assert held is not None, (tmp_path / "victim.log").read_text()
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        assert store.queue.get(held.job_id).status == "leased"  # type: ignore[union-attr]

        # two fresh workers finish the queue; the killed job is redone once its lease expires
        workers = [_start_worker(ragloop_home, sqlite_url, tmp_path, f"w{i}", "--lease-seconds", "2") for i in range(2)]
        try:
            for i, w in enumerate(workers):
                _wait_started(tmp_path, f"w{i}", w)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                tiers = store.queue.stats().by_tier
                if all(
                    tiers.get(t, {}).get(st, 0) == 0 for t in ("heuristic", "llm_judge") for st in ("queued", "leased")
                ):
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(f"queue not drained: {store.queue.stats()}")
        finally:
            for w in workers:
                w.send_signal(signal.SIGTERM)
            codes = [w.wait(timeout=30) for w in workers]
        assert codes == [0, 0], [(tmp_path / f"w{i}.log").read_text() for i in range(2)]

        with store.db.transaction(write=False) as s:
            rows = s.execute(select(Evaluation.answer_id, Evaluation.evaluation_tier, Evaluation.status)).all()
        for answer_id in ids:
            tier1 = [r for r in rows if r.answer_id == answer_id and r.evaluation_tier == "heuristic"]
            assert [r.status for r in tier1] == ["completed"], answer_id
        judged = {r.answer_id for r in rows if r.evaluation_tier == "llm_judge"}
        routed = {j.answer_id for j in _jobs(store) if j.tier == "llm_judge"}
        assert judged == routed  # every routed answer was judged exactly once too
        assert sum(1 for r in rows if r.evaluation_tier == "llm_judge") == len(routed)
        redone = store.queue.get(held.job_id)
        assert redone is not None and redone.status == "done" and redone.attempts == 2
        # human review jobs and held review candidates wait for people / the day's end, never for a worker
        assert all(j.status == "done" for j in _jobs(store) if j.tier not in (Tier.HUMAN, Tier.HUMAN_CANDIDATE))
    finally:
        store.close()
