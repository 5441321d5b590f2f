"""Assignment: stable hashing, the split share, status overrides, and the real Redis cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from ragloop.experiments import (
    ComputedAssigner,
    ExperimentStatus,
    RedisCachedAssigner,
    Variant,
    bucket,
    hashed_variant,
    make_assigner,
)

SESSIONS = [f"session-{i}" for i in range(20_000)]
# A change of the hash would move every live session to another arm mid-experiment: pinned.
PINNED = {
    ("exp-1", "alice"): 0.774060374275141,
    ("exp-1", "bob"): 0.8082243067039555,
    ("exp-2", "alice"): 0.4913850946970619,
}


def test_bucket_is_sha256_and_pinned() -> None:
    import hashlib

    digest = hashlib.sha256(b"exp-1\x00alice").digest()
    assert bucket("exp-1", "alice") == int.from_bytes(digest[:8], "big") / 2**64
    assert {key: bucket(*key) for key in PINNED} == PINNED


def test_same_answer_in_other_processes_and_hash_seeds() -> None:
    code = (
        "import json; from ragloop.experiments.assignment import bucket;"
        "print(json.dumps([bucket('exp-1', s) for s in ('alice', 'bob', 'carol')]))"
    )
    here = [bucket("exp-1", s) for s in ("alice", "bob", "carol")]
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == here


def test_split_share_and_monotone_split() -> None:
    share = sum(hashed_variant("exp-share", s, 0.05) is Variant.TREATMENT for s in SESSIONS) / len(SESSIONS)
    assert abs(share - 0.05) < 0.005  # binomial sd 0.0015
    at_10 = {s for s in SESSIONS if hashed_variant("exp-share", s, 0.10) is Variant.TREATMENT}
    at_5 = {s for s in SESSIONS if hashed_variant("exp-share", s, 0.05) is Variant.TREATMENT}
    assert at_5 < at_10, "raising the split must keep every treated session treated"
    other = {s for s in SESSIONS if hashed_variant("exp-other", s, 0.05) is Variant.TREATMENT}
    overlap = len(at_5 & other) / len(at_5)
    assert overlap < 0.15, "experiments must split sessions independently (expected overlap ~5%)"


def test_a_session_always_sees_one_variant() -> None:
    assigner = ComputedAssigner()
    first = [assigner.assign("exp-1", s, 0.3).variant for s in SESSIONS[:500]]
    again = [assigner.assign("exp-1", s, 0.3).variant for s in SESSIONS[:500]]
    assert first == again and Variant.TREATMENT in first and Variant.CONTROL in first


@pytest.mark.parametrize("status", [s for s in ExperimentStatus if s is not ExperimentStatus.RUNNING])
def test_a_stopped_or_halted_experiment_sends_everyone_to_control(status: ExperimentStatus) -> None:
    assigner = ComputedAssigner()
    got = {assigner.assign("exp-1", s, 0.5, status).variant for s in SESSIONS[:300]}
    assert got == {Variant.CONTROL}
    assert assigner.assign("exp-1", "alice", 0.5, status.value).source == "status"  # type: ignore[arg-type]


@pytest.mark.parametrize("split", [0.0, -0.1, 0.51, 1.0, float("nan"), "0.1", None])
def test_invalid_split_is_refused(split: Any) -> None:
    with pytest.raises(ValueError, match=r"traffic_split must lie in \(0, 0.5\]"):
        ComputedAssigner().assign("exp-1", "alice", split)


@pytest.mark.parametrize(("experiment", "session"), [("", "alice"), ("exp-1", ""), ("exp-1", None)])
def test_empty_ids_are_refused(experiment: Any, session: Any) -> None:
    with pytest.raises(ValueError, match="must be a non-empty string"):
        ComputedAssigner().assign(experiment, session, 0.05)


def test_factory() -> None:
    assert isinstance(make_assigner(None), ComputedAssigner)
    assert isinstance(make_assigner(""), ComputedAssigner)
    with pytest.raises(ValueError, match="only apply to the Redis"):
        make_assigner(None, prefix="x")


# -- the real Redis --


def test_redis_caches_and_a_second_server_reads_the_cache(redis_url: str, redis_prefix: str, redis_client: Any) -> None:
    one = make_assigner(redis_url, prefix=redis_prefix)
    two = RedisCachedAssigner(redis_url, prefix=redis_prefix)
    try:
        assert isinstance(one, RedisCachedAssigner)
        sessions = SESSIONS[:200]
        first = [one.assign("exp-r", s, 0.2) for s in sessions]
        assert {a.source for a in first} == {"computed"}
        assert [a.variant for a in first] == [hashed_variant("exp-r", s, 0.2) for s in sessions]
        hits = [two.assign("exp-r", s, 0.2) for s in sessions]
        assert {a.source for a in hits} == {"cache"} and [a.variant for a in hits] == [a.variant for a in first]
        key = one.key("exp-r", sessions[0])
        assert redis_client.get(key).decode() == first[0].variant.value
        assert 0 < redis_client.ttl(key) <= one.ttl_seconds
    finally:
        one.close()
        two.close()


def test_cached_sessions_keep_their_variant_when_the_split_is_lowered(redis_url: str, redis_prefix: str) -> None:
    assigner = RedisCachedAssigner(redis_url, prefix=redis_prefix)
    try:
        treated = [s for s in SESSIONS[:2000] if hashed_variant("exp-s", s, 0.3) is Variant.TREATMENT]
        moved = [s for s in treated if hashed_variant("exp-s", s, 0.05) is Variant.CONTROL]
        assert moved
        for s in moved:
            assert assigner.assign("exp-s", s, 0.3).variant is Variant.TREATMENT
        assert {assigner.assign("exp-s", s, 0.05).variant for s in moved} == {Variant.TREATMENT}
        assert ComputedAssigner().assign("exp-s", moved[0], 0.05).variant is Variant.CONTROL
    finally:
        assigner.close()


def test_halt_bypasses_the_cache_and_forget_clears_it(redis_url: str, redis_prefix: str, redis_client: Any) -> None:
    assigner = RedisCachedAssigner(redis_url, prefix=redis_prefix)
    try:
        treated = next(s for s in SESSIONS if hashed_variant("exp-h", s, 0.05) is Variant.TREATMENT)
        assert assigner.assign("exp-h", treated, 0.05).variant is Variant.TREATMENT
        halted = assigner.assign("exp-h", treated, 0.05, ExperimentStatus.HALTED)
        assert halted.variant is Variant.CONTROL and halted.source == "status"
        assert redis_client.get(assigner.key("exp-h", "never-seen")) is None
        assigner.assign("exp-h", "never-seen", 0.05, ExperimentStatus.HALTED)
        assert redis_client.get(assigner.key("exp-h", "never-seen")) is None, "a halt must not write the cache"
        assert assigner.forget("exp-h") == 1
        assert redis_client.get(assigner.key("exp-h", treated)) is None
    finally:
        assigner.close()


def test_unreachable_redis_falls_back_to_the_computed_variant() -> None:
    assigner = RedisCachedAssigner("redis://127.0.0.1:1/0")
    try:
        got = assigner.assign("exp-down", "alice", 0.5)
        assert got.source == "computed" and got.variant is hashed_variant("exp-down", "alice", 0.5)
        assert assigner.errors == 1
    finally:
        assigner.close()
