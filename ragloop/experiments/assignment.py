"""Which variant serves a session: consistent hashing on the session id, optionally cached in Redis.

A session must see one variant for the whole experiment (alternating better and worse answers
within one conversation is jarring, and it would mix the arms' scores). The variant is a pure
function of (experiment id, session id, traffic split): the first 8 bytes of
sha256("{experiment_id}\\0{session_id}") read as a number in [0, 1) — the session's *bucket* —
and buckets below `traffic_split` get the treatment. sha256 rather than `hash()`: the same answer
in every process, on every machine, under any PYTHONHASHSEED. The experiment id is part of the
hash so that a session's arm in one experiment says nothing about its arm in the next. Raising
the split keeps every treated session treated (their buckets stay below it).

`RedisCachedAssigner` stores the answer under `{prefix}:{experiment_id}:{session_id}` (the seed's
`experiment_assignment:{session_id}`, per experiment) with a TTL: a later *lowering* of the split
does not move sessions already assigned, and a fleet of servers agrees without recomputing.
When Redis fails, the computed answer is used and the error logged: the query path never fails
for a cache — and the computed answer is the one the cache would hold unless the split changed.

Status comes first: only a RUNNING experiment sends anyone to treatment. A guardrail halt (or a
stop, rejection or promotion) returns control for everyone at once, without touching the cache —
after a promotion "control" is the new current version, so nobody is left on the old one.

One synchronous interface: a localhost Redis GET takes well under a millisecond, and an async
caller can run it in a thread; two parallel hierarchies would drift.
"""

from __future__ import annotations

import hashlib
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from ragloop.experiments.stats import check_split

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "ragloop:experiment_assignment"
DEFAULT_TTL_SECONDS = 30 * 24 * 3600


class Variant(StrEnum):
    CONTROL = "control"
    TREATMENT = "treatment"


class ExperimentStatus(StrEnum):
    """Lifecycle of an experiment as assignment sees it: only RUNNING splits traffic."""

    RUNNING = "running"
    HALTED = "halted"  # a guardrail was breached
    PROMOTING = "promoting"  # one server has claimed the promotion (smoke test under way)
    STOPPED = "stopped"
    PROMOTED = "promoted"
    REJECTED = "rejected"


Source = Literal["computed", "cache", "status"]


@dataclass(frozen=True)
class Assignment:
    experiment_id: str
    session_id: str
    variant: Variant
    bucket: float
    source: Source
    """`status`: the experiment is not running; `cache`: read from Redis; `computed`: hashed now."""


def bucket(experiment_id: str, session_id: str) -> float:
    """The session's position in [0, 1) for this experiment (uniform, stable everywhere)."""
    digest = hashlib.sha256(f"{experiment_id}\0{session_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def hashed_variant(experiment_id: str, session_id: str, traffic_split: float) -> Variant:
    return Variant.TREATMENT if bucket(experiment_id, session_id) < traffic_split else Variant.CONTROL


class Assigner(ABC):
    """assign(experiment, session, split, status) -> Assignment; subclasses decide how a running
    experiment's answer is obtained."""

    name: str = "assigner"

    def assign(
        self,
        experiment_id: str,
        session_id: str,
        traffic_split: float,
        status: ExperimentStatus = ExperimentStatus.RUNNING,
    ) -> Assignment:
        for label, value in (("experiment_id", experiment_id), ("session_id", session_id)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{label} must be a non-empty string, got {value!r}")
        check_split(traffic_split)
        status = ExperimentStatus(status)
        if status is not ExperimentStatus.RUNNING:
            return Assignment(experiment_id, session_id, Variant.CONTROL, bucket(experiment_id, session_id), "status")
        return self._assign(experiment_id, session_id, traffic_split)

    @abstractmethod
    def _assign(self, experiment_id: str, session_id: str, traffic_split: float) -> Assignment: ...

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections (nothing by default)."""


class ComputedAssigner(Assigner):
    """Hash every time: no state, no I/O."""

    name = "computed"

    def _assign(self, experiment_id: str, session_id: str, traffic_split: float) -> Assignment:
        b = bucket(experiment_id, session_id)
        variant = Variant.TREATMENT if b < traffic_split else Variant.CONTROL
        return Assignment(experiment_id, session_id, variant, b, "computed")


class RedisCachedAssigner(Assigner):
    """Hash once per (experiment, session); later lookups read Redis."""

    name = "redis"

    def __init__(
        self,
        client: redis.Redis | str,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
    ) -> None:
        if isinstance(client, str):
            try:
                import redis as redis_lib
            except ImportError as exc:  # pragma: no cover - depends on the installed extras
                raise RuntimeError("a Redis URL needs the redis client: pip install 'ragloop[redis]'") from exc
            client = redis_lib.Redis.from_url(client, socket_timeout=0.5, socket_connect_timeout=0.5)
        if ttl_seconds < 1:
            raise ValueError(f"ttl_seconds must be >= 1, got {ttl_seconds}")
        self.client: Any = client
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.errors = 0
        """Redis failures answered with the computed variant (a health signal)."""

    def key(self, experiment_id: str, session_id: str) -> str:
        return f"{self.prefix}:{experiment_id}:{session_id}"

    def _assign(self, experiment_id: str, session_id: str, traffic_split: float) -> Assignment:
        import redis as redis_lib

        b = bucket(experiment_id, session_id)
        key = self.key(experiment_id, session_id)
        computed = Variant.TREATMENT if b < traffic_split else Variant.CONTROL
        try:
            cached = self.client.get(key)
            if cached is None:
                if self.client.set(key, computed.value, nx=True, ex=self.ttl_seconds):
                    return Assignment(experiment_id, session_id, computed, b, "computed")
                cached = self.client.get(key)  # another server wrote first: its answer stands
            if cached is not None:
                value = cached.decode() if isinstance(cached, bytes) else str(cached)
                return Assignment(experiment_id, session_id, Variant(value), b, "cache")
        except (redis_lib.RedisError, ValueError) as exc:
            self.errors += 1
            log.warning("experiment assignment cache unavailable (%s); using the computed variant", exc)
        return Assignment(experiment_id, session_id, computed, b, "computed")

    def forget(self, experiment_id: str) -> int:
        """Drop an experiment's cached assignments (when it ends); returns how many."""
        keys = list(self.client.scan_iter(match=f"{self.prefix}:{experiment_id}:*", count=1000))
        return int(self.client.delete(*keys)) if keys else 0

    def close(self) -> None:
        self.client.close()


def make_assigner(redis_url: str | None = None, **options: Any) -> Assigner:
    """`RAGLOOP_REDIS_URL` set -> Redis-cached; unset or empty -> computed."""
    if redis_url:
        return RedisCachedAssigner(redis_url, **options)
    if options:
        raise ValueError(f"options {sorted(options)} only apply to the Redis-cached assigner")
    return ComputedAssigner()
