"""Many processes, one truth: two `ragloop serve` and three `ragloop worker` processes on loopback
against one PostgreSQL database and one Redis, one of each killed with SIGKILL mid-flight.

What a fleet must keep true however its processes die, each checked on what the database (and
Redis) hold afterwards, not on what the processes said:

- no answer evaluated twice: at most one evaluation per (answer, tier), and exactly one completed
  tier-1 evaluation for every answer id a client received (from either server, before or after the kill);
- no job lost: every tier-1 and tier-2 job ends done or failed, none is left queued or leased past
  its lease (the killed worker's lease runs out and a survivor redoes the job);
- one experiment assignment per session: a session asked alternately on both servers sees one
  variant (the hash the assigner computes, and the one Redis holds);
- one remediation applied once: all three workers run their remediation pass at start-up over the
  same proposed action; it is applied by one of them, audited once, and its entry is in Redis;
- one current pipeline version: both servers register and activate their start-up configuration.

The knowledge base is one PostgreSQL collection (`RAGLOOP_COLLECTIONS_URL`, ingested once) that
both servers and the workers' remediation read; each process has its own `RAGLOOP_HOME` for the
rest (the workers share the first server's). About a minute and a half on an idle two-core machine.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.pool import NullPool

from ragloop.experiments import hashed_variant
from ragloop.retrieval.pgstore import schema_for
from ragloop.service.pipelines import ensure_active_version
from ragloop.store import Evaluation, EvaluationJob, ImprovementAction, Store
from ragloop.store.models import PipelineVersion, Query
from tests.agent.conftest import DOCS, make_collection
from tests.improve.remediation_support import QUESTION, chunk_of, propose_expansion
from tests.service.conftest import CFG, Keys, make_keys, open_store
from tests.service.test_durability_kill import start_server
from tests.service.test_evaluation import QUESTIONS
from tests.service.test_processes import _start_worker, _wait_started
from tests.store.conftest import redis_test_url

pytestmark = pytest.mark.postgres

CLIENTS = 4
TURNS = 3
"""Questions per session, alternating between the servers."""
KILL_SERVER_AFTER = 12
"""Answers received before server A is killed."""
STOP_AFTER = 36
"""Answers received before the clients stop."""
LEASE_S = "2"


@dataclass
class Traffic:
    """What the clients saw: answer id -> (server, session), and the failed requests."""

    served: dict[str, tuple[str, str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def client(n: int, bases: dict[str, str], dead: set[str], keys: Keys, traffic: Traffic, stop: threading.Event) -> None:
    """Sessions of `TURNS` questions, turn t of session j on server (n + j + t) % 2: every session
    meets both servers while both are up; a request refused by a dead server goes to the other."""
    names = sorted(bases)
    clients = {name: httpx.Client(base_url=base, headers=keys.u, timeout=30) for name, base in bases.items()}
    try:
        j = 0
        while not stop.is_set():
            session = f"mp-{n}-{j}"
            for t in range(TURNS):
                name = names[(n + j + t) % 2]
                if name in dead:
                    name = next(x for x in names if x not in dead)
                body = {"question": QUESTIONS[(n + j + t) % len(QUESTIONS)], "session_id": session}
                try:
                    r = clients[name].post("/v1/query", json=body)
                except httpx.TransportError as exc:
                    with traffic.lock:
                        traffic.errors.append(f"{name}: {type(exc).__name__}")
                    continue
                with traffic.lock:
                    if r.status_code == 200:
                        traffic.served[r.json()["answer_id"]] = (name, session)
                    else:
                        traffic.errors.append(f"{name}: {r.status_code} {r.text[:200]}")
            j += 1
    finally:
        for c in clients.values():
            c.close()


@pytest.fixture
def fleet_env(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """(Redis URL, collection name): the environment every process of the fleet inherits."""
    url = redis_test_url()
    name = f"mp{secrets.token_hex(4)}"  # its own Redis keys (expansion entries) and collection schema
    for var, value in {
        "RAGLOOP_REDIS_URL": url,
        "RAGLOOP_COLLECTIONS_URL": postgres_url,
        "RAGLOOP_COLLECTION": name,
        "RAGLOOP_TIER2_SAMPLE_RATE": "0.5",  # tier-2 jobs too
        "RAGLOOP_DIAGNOSE": "false",
        "RAGLOOP_EXPERIMENT_AGGREGATE_INTERVAL_S": "0",
        "RAGLOOP_AUTO_EXPERIMENT_INTERVAL_S": "0",
    }.items():
        monkeypatch.setenv(var, value)
    client = redis.Redis.from_url(url)
    try:
        yield url, name
    finally:
        client.delete(f"ragloop:expansion:{name}", f"ragloop:expansion:{name}:version")
        client.close()
        engine = create_engine(postgres_url, poolclass=NullPool)
        try:
            with engine.begin() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema_for(name)}" CASCADE'))
        finally:
            engine.dispose()


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL


def _jobs(store: Store) -> list[EvaluationJob]:
    with store.db.transaction(write=False) as s:
        return list(s.scalars(select(EvaluationJob)))


def _wait(pred: Callable[[], bool], timeout: float, what: str | Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def test_two_servers_three_workers_one_truth(
    postgres_url: str, fleet_env: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis_url, coll_name = fleet_env
    homes = {"A": tmp_path / "home-a", "B": tmp_path / "home-b"}
    monkeypatch.setenv("RAGLOOP_HOME", str(homes["A"]))
    make_collection(coll_name, DOCS, tmp_path / "docs").close()  # into PostgreSQL: one knowledge base
    from ragloop.config import Settings
    from ragloop.retrieval.collection import Collection

    store = open_store(postgres_url)
    procs: list[subprocess.Popen[bytes]] = []
    experiment_id = "none"
    try:
        keys = make_keys(store)
        coll = Collection(coll_name, Settings())
        action = propose_expansion(store, coll, QUESTION, [chunk_of(coll, "ferry.md")])
        coll.close()

        # the pipeline the servers start with is active before the workers' first remediation pass reads
        # it (the servers' own start-up race on it is tests/store/test_pipeline_versions.py's)
        ensure_active_version(store, CFG)
        # three workers start at once: all race for the proposed remediation
        victim = _start_worker(
            homes["A"], postgres_url, tmp_path, "w0", "--lease-seconds", LEASE_S, "--job-delay", "0.3"
        )
        workers = [victim] + [
            _start_worker(homes["A"], postgres_url, tmp_path, f"w{i}", "--lease-seconds", LEASE_S) for i in (1, 2)
        ]
        procs.extend(workers)
        # both servers start beside them
        started: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
        failures: list[BaseException] = []

        def boot(name: str) -> None:
            try:
                # generous: five processes importing at once on a loaded two-core machine
                started[name] = start_server(homes[name], tmp_path, f"server-{name}", postgres_url, timeout=240)
            except BaseException as exc:
                failures.append(exc)

        booting = [threading.Thread(target=boot, args=(n,)) for n in homes]
        for t in booting:
            t.start()
        for t in booting:
            t.join(300)
        procs.extend(p for p, _ in started.values())
        assert not failures, failures
        bases = {name: base for name, (_, base) in started.items()}
        for i, w in enumerate(workers):
            _wait_started(tmp_path, f"w{i}", w, timeout=180)  # generous: a loaded machine imports slowly

        spec = {
            "name": "k4_vs_k3",
            "control": {"retrieval": {"k": 4}},
            "treatment": {"retrieval": {"k": 3}},
            "traffic_split": 0.5,
        }
        made = httpx.post(f"{bases['A']}/v1/experiments", json=spec, headers=keys.a, timeout=30)
        assert made.status_code == 201, made.text
        experiment_id = made.json()["experiment_id"]

        traffic, stop, dead = Traffic(), threading.Event(), set[str]()
        threads = [
            threading.Thread(target=client, args=(n, bases, dead, keys, traffic, stop), daemon=True)
            for n in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        try:
            _wait(lambda: len(traffic.served) >= KILL_SERVER_AFTER, 120, "answers from both servers")
            _kill(started["A"][0])  # mid-flight: the clients have requests open on it
            dead.add("A")
            # the victim is killed while it holds a lease (after it has finished at least one job)
            victim_id = f":{victim.pid}:"

            def victim_holds() -> bool:
                jobs = [j for j in _jobs(store) if j.leased_by and victim_id in j.leased_by]
                return any(j.status == "done" for j in jobs) and any(j.status == "leased" for j in jobs)

            _wait(victim_holds, 120, "the victim worker to hold a lease")
            _kill(victim)
            _wait(lambda: len(traffic.served) >= STOP_AFTER, 120, "answers after the kills")
        finally:
            stop.set()
            for t in threads:
                t.join(60)

        def drained() -> bool:
            return all(j.status in ("done", "failed") for j in _jobs(store) if j.tier in ("heuristic", "llm_judge"))

        _wait(drained, 120, lambda: f"the queue to drain: {store.queue.stats()}")
        _stop(procs)
        logs = {p.name: p.read_text()[-2000:] for p in tmp_path.glob("*.log")}

        # what the clients saw
        served = dict(traffic.served)
        assert {name for name, _ in served.values()} == {"A", "B"}, (traffic.errors[:5], logs)
        with store.db.transaction(write=False) as s:
            evaluations = s.execute(select(Evaluation.answer_id, Evaluation.evaluation_tier, Evaluation.status)).all()
            queries = s.execute(
                select(Query.answer_id, Query.session_id, Query.experiment_id, Query.variant, Query.retrieved_chunk_ids)
            ).all()
            active = s.scalar(select(func.count()).where(PipelineVersion.status == "active"))
            applied = s.scalar(select(ImprovementAction).where(ImprovementAction.action_id == action.action_id))
        jobs = _jobs(store)

        # one knowledge base: B has no collection files, yet every answer retrieved from it
        assert not (homes["B"] / "collections" / coll_name).exists()
        assert all(q.retrieved_chunk_ids for q in queries if q.answer_id in served)
        # no answer evaluated twice
        per_tier = Counter((r.answer_id, r.evaluation_tier) for r in evaluations)
        assert max(per_tier.values()) == 1, [k for k, v in per_tier.items() if v > 1][:5]
        tier1 = {r.answer_id: r.status for r in evaluations if r.evaluation_tier == "heuristic"}
        missing = [a for a in served if tier1.get(a) != "completed"]
        assert not missing, (missing[:5], logs)
        # no job lost: every answer stored has its tier-1 job, every automatic job ended
        stored_answers = {q.answer_id for q in queries if q.answer_id}
        assert set(served) <= stored_answers
        heuristic_jobs = {j.answer_id for j in jobs if j.tier == "heuristic"}
        assert stored_answers <= heuristic_jobs
        assert all(j.status in ("done", "failed") for j in jobs if j.tier in ("heuristic", "llm_judge"))
        judged = {r.answer_id for r in evaluations if r.evaluation_tier == "llm_judge"}
        assert judged == {j.answer_id for j in jobs if j.tier == "llm_judge"}
        assert any(j.attempts >= 2 for j in jobs), "the killed worker's lease was never taken over"
        # one experiment assignment per session, the same on both servers, the one Redis holds
        variants: dict[str, set[str | None]] = defaultdict(set)
        for q in queries:
            if q.answer_id in served:
                assert q.experiment_id == experiment_id, q
                variants[q.session_id].add(q.variant)
        assert all(len(v) == 1 for v in variants.values()), {k: v for k, v in variants.items() if len(v) > 1}
        both = {
            sess for sess in {s for _, s in served.values()} if len({n for n, s in served.values() if s == sess}) == 2
        }
        assert both, "no session was answered by both servers"
        cache = redis.Redis.from_url(redis_url, decode_responses=True)
        try:
            for session, (variant,) in variants.items():
                assert variant == hashed_variant(experiment_id, session, 0.5).value
                assert cache.get(f"ragloop:experiment_assignment:{experiment_id}:{session}") == variant
            # one remediation applied once, its entry in the shared expansion cache
            assert applied is not None and applied.status == "applied" and applied.attempts == 1, applied
            assert len(store.audit.timeline(action_type="remediation:expansion_cache")) == 1
            assert cache.hlen(f"ragloop:expansion:{coll_name}") == 1
            # the fleet's tier-1 features and rate limits are Redis's too
            assert next(cache.scan_iter(match="ragloop:tier1:*"), None) is not None
            assert cache.exists(f"ragloop:ratelimit:{keys.user.split('_')[1]}")
        finally:
            cache.close()
        # one current pipeline version
        assert active == 1
    finally:
        _stop(procs)
        store.close()
        with redis.Redis.from_url(redis_url) as cache:
            for pattern in (f"ragloop:experiment_assignment:{experiment_id}:*", "ragloop:tier1:*"):
                stale = list(cache.scan_iter(match=pattern))
                if stale:
                    cache.delete(*stale)
