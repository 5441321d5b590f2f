"""The simulation's split: stable across processes, ~30% held out, whole groups on one side."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ragloop.improve.simulation.split import TEST_SHARE, is_test, position, split


def test_the_side_is_a_function_of_the_group_alone() -> None:
    groups = [f"conversation-{i}" for i in range(50)]
    here = [is_test(g) for g in groups]
    code = (
        "from ragloop.improve.simulation.split import is_test; print([is_test(f'conversation-{i}') for i in range(50)])"
    )
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert str(here) == there.strip()  # another interpreter (another hash seed) agrees
    assert position("a") != position("a", salt="other")


def test_about_the_share_is_held_out() -> None:
    n = 4000
    share = sum(is_test(f"article-{i}") for i in range(n)) / n
    assert abs(share - TEST_SHARE) < 0.03


def test_groups_never_straddle() -> None:
    items = [(f"g{i % 40}", i) for i in range(400)]
    parts = split(items, lambda it: it[0])
    assert {g for g, _ in parts.traffic}.isdisjoint({g for g, _ in parts.test})
    assert sum(parts.counts().values()) == 400
    assert [i for _, i in parts.traffic] == sorted(i for _, i in parts.traffic)  # order kept


def test_a_bad_share_is_refused() -> None:
    with pytest.raises(ValueError, match="share"):
        is_test("x", share=1.5)
