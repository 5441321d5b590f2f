"""`RAGLOOP_CLOCK`: one compressed clock shared by every process, durations of work put on it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ragloop.config import Settings
from ragloop.config.clock import (
    CONFIGURED_CLOCK,
    ManualClock,
    ScaledClock,
    SystemClock,
    on_clock,
    parse_clock,
    process_clock,
    real_seconds,
)
from ragloop.store import EvaluationQueue, Store, utcnow

EPOCH = datetime(2026, 3, 2, tzinfo=UTC)


def test_parse_round_trips_and_refuses_nonsense() -> None:
    assert isinstance(parse_clock(None), SystemClock) and isinstance(parse_clock("system"), SystemClock)
    c = ScaledClock(EPOCH, 1000.5, 720.0, real=lambda: 1010.5)
    again = parse_clock(c.spec())
    assert isinstance(again, ScaledClock) and (again.epoch, again.anchor, again.factor) == (EPOCH, 1000.5, 720.0)
    assert c.now() == EPOCH + timedelta(seconds=7200)
    for bad in ("scaled:yesterday:1:2", "scaled:2026-03-02T00:00:00+00:00:1:0", "sundial"):
        with pytest.raises(ValueError, match="RAGLOOP_CLOCK"):
            parse_clock(bad)


def test_durations_of_work_go_on_the_clock_and_windows_come_back() -> None:
    c = ScaledClock(EPOCH, time.time(), 720.0)
    assert on_clock(c, 60) == timedelta(hours=12)
    assert real_seconds(c, 86400) == pytest.approx(120.0)
    assert on_clock(ManualClock(), 60) == timedelta(seconds=60)  # tests' clocks keep their meaning


def test_the_environment_names_the_process_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ScaledClock(EPOCH, time.time(), 1000.0).spec()
    monkeypatch.setenv("RAGLOOP_CLOCK", spec)
    assert isinstance(process_clock(), ScaledClock) and CONFIGURED_CLOCK.rate == 1000.0
    assert abs((utcnow() - EPOCH).total_seconds()) < 1000.0 * 5  # the store stamps on it
    assert abs((Settings().clock.now() - EPOCH).total_seconds()) < 1000.0 * 5
    monkeypatch.delenv("RAGLOOP_CLOCK")
    assert isinstance(process_clock(), SystemClock) and abs((utcnow() - datetime.now(UTC)).total_seconds()) < 5


def test_two_processes_read_the_same_simulated_time() -> None:
    """The server, its workers and the driver agree because the spec, not a process, holds the clock."""
    spec = ScaledClock(EPOCH, time.time(), 720.0).spec()
    code = "from ragloop.store import utcnow; print(utcnow().timestamp())"
    env = dict(os.environ, RAGLOOP_CLOCK=spec)
    here = ScaledClock(EPOCH, float(spec.rsplit(":", 2)[1]), 720.0)
    t0 = here.now().timestamp()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    t1 = here.now().timestamp()
    assert t0 <= float(out.stdout) <= t1


def test_a_lease_lasts_its_real_seconds_under_a_fast_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGLOOP_CLOCK", ScaledClock(EPOCH, time.time(), 3600.0).spec())
    with Store.open(f"sqlite:///{tmp_path / 'q.db'}") as store:
        from ragloop.store.vocabulary import Tier

        q = store.queue
        assert isinstance(q, EvaluationQueue)
        answer = store.queries.record_answer(session_id="s", question="q?", answer_text="a", pipeline_version="pv-1")
        q.enqueue(answer.answer_id, Tier.HEURISTIC)
        job = q.claim("w1", lease_seconds=5.0)
        assert job is not None and job.lease_expires_at is not None
        # 5 real seconds are 5 clock-hours: nobody else may take the job for that long
        assert job.lease_expires_at - q.clock() > timedelta(hours=4)
        assert q.claim("w2", lease_seconds=5.0) is None
