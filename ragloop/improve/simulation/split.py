"""The simulation's one split: traffic (~70%) and held-out test (~30%) by a stable hash of the group.

A group is what must never straddle the split: a SQuAD article (its questions share one passage set)
or an MTRAG conversation (its turns build on each other). The side is a function of the group key
and a fixed salt alone — sha256, not Python's salted `hash` — so every process, machine and rerun
puts a group on the same side, the split is fixed before the first run, and the simulation, the
offline optimum (`ragloop.improve.optimum`) and any report all read the same held-out part.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

TEST_SHARE = 0.3
SALT = "ragloop-simulation-v1"

T = TypeVar("T")


def position(group: str, salt: str = SALT) -> float:
    """The group's place in [0, 1): the first 8 bytes of sha256(salt \\0 group) as a fraction."""
    digest = hashlib.sha256(f"{salt}\0{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def is_test(group: str, share: float = TEST_SHARE, salt: str = SALT) -> bool:
    """Held out (never replayed as traffic, never read by a fit) when its position is below `share`."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the test share must lie in [0, 1], got {share}")
    return position(group, salt) < share


@dataclass(frozen=True)
class Split(Generic[T]):
    traffic: list[T]
    test: list[T]

    def counts(self) -> dict[str, int]:
        return {"traffic": len(self.traffic), "test": len(self.test)}


def item_group(item: Any) -> str:
    """The group of an evaluation item (`ragloop.evaluation.suites.EvalItem`): its SQuAD article
    (`meta["title"]`), else its MTRAG conversation (the part of the task id before `<::>`)."""
    title = (getattr(item, "meta", None) or {}).get("title")
    return str(title) if title else str(item.id).split("<::>")[0]


def split(items: Iterable[T], group_of: Callable[[T], str], share: float = TEST_SHARE, salt: str = SALT) -> Split[T]:
    """`items` in their order, each on its group's side."""
    traffic: list[T] = []
    test: list[T] = []
    for item in items:
        (test if is_test(group_of(item), share, salt) else traffic).append(item)
    return Split(traffic, test)
