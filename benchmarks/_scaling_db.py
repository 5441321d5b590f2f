"""Database side of `load_scaling.py`: a fresh service database per (servers, workers) pair, the
shared knowledge-base database that outlives the pairs, and the audit of what the fleet stored.

Split out so the load driver stays readable; nothing here starts a process.
"""

from __future__ import annotations

import os
import time

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from ragloop.improve.simulation.service import fresh_postgres


def database_url(admin_url: str, database: str) -> str:
    return make_url(admin_url).set(database=database).render_as_string(hide_password=False)


def fresh_state(admin_url: str, database: str, redis_url: str) -> str:
    """Drop and create the service database, empty the Redis db; returns the database URL."""
    import redis

    fresh_postgres(admin_url, database, "")
    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()
    return database_url(admin_url, database)


def ensure_database(admin_url: str, database: str) -> str:
    """The knowledge-base database, created once and kept: the collection and the embedding cache
    in it are what a rerun reuses (an ingest then only compares content hashes)."""
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            q = text("SELECT 1 FROM pg_database WHERE datname = :d")
            if conn.execute(q, {"d": database}).scalar() is None:
                conn.execute(text(f'CREATE DATABASE "{database}"'))
    finally:
        engine.dispose()
    return database_url(admin_url, database)


def connections(admin_url: str, databases: list[str]) -> int:
    """PostgreSQL connections the fleet holds on its databases (pools keep them open between requests)."""
    engine = create_engine(admin_url)
    try:
        with engine.connect() as conn:
            q = text("SELECT count(*) FROM pg_stat_activity WHERE datname = ANY(:d)")
            return int(conn.execute(q, {"d": databases}).scalar_one())
    finally:
        engine.dispose()


def drain(url: str, timeout: float) -> float:
    """Seconds until no tier-1/tier-2 job is queued or leased (or the timeout)."""
    from ragloop.store import Store

    t0 = time.monotonic()
    with Store.open(url, migrate=False) as store:
        while time.monotonic() - t0 < timeout:
            tiers = store.queue.stats().by_tier
            if all(tiers.get(t, {}).get(s, 0) == 0 for t in ("heuristic", "llm_judge") for s in ("queued", "leased")):
                break
            time.sleep(0.5)
    return time.monotonic() - t0


def audit(url: str, served: list[str]) -> dict[str, int]:
    """Every answer a user received must be stored with exactly one tier-1 evaluation."""
    from sqlalchemy import select

    from ragloop.store import Answer, Evaluation, Store

    with Store.open(url, migrate=False) as store, store.db.transaction(write=False) as s:
        stored = set(s.scalars(select(Answer.answer_id)))
        tiers = list(s.execute(select(Evaluation.answer_id, Evaluation.evaluation_tier)))
        counts = store.queue.stats().counts
    per: dict[str, int] = {}
    for a, tier in tiers:
        if tier == "heuristic":
            per[a] = per.get(a, 0) + 1
    return {
        "served": len(served),
        "stored": len(stored),
        "lost_answers": sum(a not in stored for a in served),
        "lost_tier1": sum(per.get(a, 0) == 0 for a in served),
        "duplicate_tier1": sum(n > 1 for n in per.values()),
        "tier2_evaluations": sum(t == "llm_judge" for _, t in tiers),
        "dead_letters": int(counts.get("dead", 0)),
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (/proc; 0 once it is gone). On a shared machine
    CPU time per answer is the figure that contention distorts least: wall time waits for the CPU."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
