"""The self-improvement simulation: its fixed split, and the quick run end to end through the CLI
(real `ragloop serve` + `ragloop worker` processes on a compressed clock) with the direction of
outcomes 1 and 3 on its slice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragloop.evaluation.datasets import default_datasets_dir
from ragloop.improve.simulation.data import (
    HELDOUT_PERCENT,
    day_sessions,
    load_mtrag_sim,
    load_squad_sim,
    parse_sizes,
    sample_heldout,
    split_part,
)

SQUAD = default_datasets_dir() / "squad2" / "squad2-dev-12articles.json"


def test_split_is_stable_and_nothing_held_out_is_replayed() -> None:
    squad = load_squad_sim()
    again = load_squad_sim(SQUAD)  # the same file, named by path
    assert squad.units == again.units and [i.id for i in squad.heldout] == [i.id for i in again.heldout]
    held = set(squad.units["heldout"])
    assert held and all(s.unit not in held for s in squad.traffic)
    assert all(i.meta["title"] in held for i in squad.heldout)
    mtrag = load_mtrag_sim()
    held_conv = set(mtrag.units["heldout"])
    assert all(s.unit not in held_conv for s in mtrag.traffic)
    share = len(held_conv) / (len(held_conv) + len(mtrag.units["traffic"]))
    assert abs(share - HELDOUT_PERCENT / 100) < 0.06  # ~30% of 397 conversations by hash
    assert split_part("squad:Normans") == split_part("squad:Normans")


def test_days_deal_out_traffic_without_splitting_sessions() -> None:
    data = load_squad_sim(paragraphs_per_article=3)
    days = day_sessions(data.traffic, 3, 20, seed=1)
    assert len(days) == 3 and all(sum(len(s.turns) for s in d) >= 20 for d in days)
    ids = [s.session_id for d in days for s in d]
    assert len(ids) == len(set(ids))
    assert sample_heldout(data.heldout, 10) == sample_heldout(data.heldout, 10)


def test_a_fresh_heldout_sample_leaves_out_the_one_measured_before() -> None:
    items = load_squad_sim(paragraphs_per_article=3).heldout
    seen = {i.id for i in sample_heldout(items, 10)}
    fresh = sample_heldout(items, 10, avoid=(10,))
    assert len(fresh) == 10 and not seen & {i.id for i in fresh}
    assert fresh == sample_heldout(items, 10, avoid=(10,))  # fixed, like the first
    third = {i.id for i in sample_heldout(items, 5, avoid=(10, 10))}  # after both earlier samples
    assert len(third) == 5 and not third & (seen | {i.id for i in fresh})
    rest = sample_heldout(items, None, avoid=(10,))
    assert len(rest) == len(items) - 10 and {i.id for i in rest} | seen == {i.id for i in items}
    assert parse_sizes("100,300") == (100, 300) and parse_sizes("") == ()
    for bad in ("100,x", "0"):
        with pytest.raises(ValueError, match="heldout-avoid"):
            parse_sizes(bad)
    with pytest.raises(ValueError, match="nothing unseen is left"):  # a sample of all of them came before
        sample_heldout(items, 10, avoid=(len(items),))


def test_a_data_file_in_the_published_format_is_taken_by_path(tmp_path: Path) -> None:
    raw = json.loads(SQUAD.read_text())
    raw["data"] = raw["data"][:2]
    small = tmp_path / "two-articles.json"
    small.write_text(json.dumps(raw))
    data = load_squad_sim(small)
    assert {s.unit for s in data.traffic} | {str(i.meta["title"]) for i in data.heldout} <= {
        a["title"] for a in raw["data"]
    }


def test_the_reviewer_says_why_an_answer_is_wrong() -> None:
    """From the gold: a wrong answer to a question that should be refused is labelled `unanswerable`
    (the τL refit then knows refusing it is right), a wrong one to an answerable question gets the
    reference as its correction, and a right refusal is just correct."""
    from ragloop.evaluation.suites import EvalItem
    from ragloop.improve.remediation.gate_labels import review_labels
    from ragloop.improve.simulation.users import UserModel, Users

    users = Users(UserModel(flip_share=0.0), 0, "")
    unanswerable = EvalItem(id="u", question="Who founded it?", kind="unanswerable", should_refuse=True)
    answerable = EvalItem(
        id="a", question="Who?", kind="answerable", should_refuse=False, answers=("Ada",), reference="Ada"
    )
    wrong = users.review(unanswerable, {"refused": False, "answer": "Bob founded it."})
    assert wrong["labels"] == ["incorrect", "unanswerable"] and "corrected_answer" not in wrong
    [label] = review_labels(None, wrong["labels"], refused=False)
    assert (label.answer_right, label.refusal_right) == (False, True)
    assert users.review(unanswerable, {"refused": True, "answer": ""})["labels"] == ["correct"]
    missed = users.review(answerable, {"refused": False, "answer": "Bob."})
    assert missed["labels"] == ["incorrect"] and missed["corrected_answer"] == "Ada"


@pytest.mark.timeout(900)
def test_quick_simulation_end_to_end(tmp_path: Path) -> None:
    env = dict(os.environ, RAGLOOP_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "ragloop", "improve", "simulate", "--quick", "--json", "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    arms = {a["label"]: a for a in out["arms"]}
    assert set(arms) == {"quick-defaults", "quick-defaults-flip50"}
    for a in arms.values():
        days = [d for d in a["e2e_accuracy_by_day"] if d]
        assert [d["day"] for d in days] == [0, 1, 2] and all(d["n"] == 60 for d in days)
        assert a["cost"]["answers"] >= 100  # the traffic went through the served API
    o1 = out["outcomes"]["1"]["squad"]
    assert o1["paired"]["n"] == 60
    assert o1["final"] >= o1["day0"]  # outcome 1's direction: the loop does not make held-out answers worse
    assert out["outcomes"]["3"]["squad"]["met"]  # outcome 3: 50% flipped ratings promote nothing 2 pt worse
    files = {Path(f).suffix for f in out["files"]}
    assert files == {".json", ".md", ".png"}


@pytest.mark.timeout(600)
def test_a_short_run_on_postgresql_and_redis(tmp_path: Path) -> None:
    """`--postgres`: the service, its workers and the driver run the arm on its own PostgreSQL database
    and Redis database (SQLite is the default); one short day on a four-article slice. Unreachable
    servers skip this, or fail it under CI=true."""
    import redis
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from tests.store.conftest import (
        DEFAULT_POSTGRES_URL,
        DEFAULT_REDIS_URL,
        POSTGRES_URL_ENV,
        REDIS_URL_ENV,
        _ci,
        require_postgres,
        require_redis,
    )

    pg = require_postgres(os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL), ci=_ci())
    rd = require_redis(os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL), ci=_ci())
    raw = json.loads(SQUAD.read_text())
    held = [a for a in raw["data"] if split_part(a["title"]) == "heldout"][:1]
    raw["data"] = held + [a for a in raw["data"] if split_part(a["title"]) == "traffic"][:3]
    for article in raw["data"]:
        article["paragraphs"] = article["paragraphs"][:3]
    small = tmp_path / "four-articles.json"
    small.write_text(json.dumps(raw))
    server = rd.rsplit("/", 1)[0] if rd.count("/") > 2 else rd
    env = dict(os.environ, RAGLOOP_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1")
    cmd = [
        *(sys.executable, "-m", "ragloop", "improve", "simulate", "--squad", str(small), "--days", "1"),
        *("--day-minutes", "0.3", "--traffic-per-day", "12", "--heldout", "8", "--golden", "6", "--json"),
        *("--postgres", "--postgres-url", pg, "--redis-url", server, "--out", str(tmp_path / "out")),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    [arm] = out["arms"]
    assert [d["day"] for d in arm["e2e_accuracy_by_day"] if d] == [0, 1]
    [results] = [Path(f) for f in out["files"] if f.endswith(".json")]
    assert json.loads(results.read_text())["meta"]["backend"] == "postgres"
    # what the service stored is in the arm's own database: the answers it served, the golden set
    engine = create_engine(make_url(pg).set(database="ragloop_sim_0"))
    client = redis.Redis.from_url(f"{server}/10")
    try:
        with engine.connect() as conn:
            answers = conn.execute(text("SELECT count(*) FROM answers")).scalar_one()
            golden = conn.execute(text("SELECT count(*) FROM golden_set_entries")).scalar_one()
        assert answers >= 12 and golden == 6
        # the service's Redis-backed state went there: rate limits, and tier 1's cache of the answers it scored
        prefixes = {k.decode().rsplit(":", 1)[0] for k in client.scan_iter(count=1000)}
        assert {"ragloop:ratelimit", "ragloop:tier1"} <= prefixes
    finally:  # leave the servers as the test found them
        engine.dispose()
        client.flushdb()
        client.close()
        admin = create_engine(pg, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text('DROP DATABASE IF EXISTS "ragloop_sim_0" WITH (FORCE)'))
        admin.dispose()


def test_an_unreachable_postgresql_is_named_before_any_arm_starts(tmp_path: Path) -> None:
    env = dict(os.environ, RAGLOOP_HOME=str(tmp_path / "home"))
    cmd = [sys.executable, "-m", "ragloop", "improve", "simulate", "--postgres", "--days", "1"]
    cmd += ["--postgres-url", "postgresql+psycopg://postgres@127.0.0.1:1/postgres", "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "--postgres: OperationalError" in proc.stderr, proc.stderr[-1000:]
    alone = [sys.executable, "-m", "ragloop", "improve", "simulate", "--redis-url", "redis://127.0.0.1:1"]
    proc = subprocess.run(alone, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "take effect with --postgres" in proc.stderr, proc.stderr[-1000:]
