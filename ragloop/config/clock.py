"""The process's one clock: every window of the loop (remediation caps per day, the auditor's wait, the
tier-2 and review intake day, experiments' minimum duration and aggregation, the nightly regression,
the stamps on queries, answers and jobs) reads it, so a simulation compresses days into minutes
through the code paths production runs. No `if simulated:` anywhere: the clock is configuration.

`RAGLOOP_CLOCK` names it for a whole process (and every process started with the same value agrees):
- unset or `system`: the system's UTC time;
- `scaled:<epoch ISO>:<anchor unix seconds>:<factor>`: at real time `anchor` the clock reads `epoch`
  and then runs `factor` times faster than real time. Every process given the same string reads the
  same time at the same moment, so a server, its workers and a driver share one simulated day.

Durations that measure *work* (a job's lease, a retry's backoff) are wall-time and are put on the
clock with `on_clock(clock, seconds)`: a 60 s lease under a 720x clock is 12 clock-hours, the same
minute of real work. Intervals that are *windows* (a day, the auditor's 24 h) are clock time, and
a periodic task sleeps `real_seconds(clock, interval)` between rounds.

A clock is also a zero-argument callable returning the time, so it can be handed to the store's
repositories and queue, which take `clock: Callable[[], datetime]`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

CLOCK_ENV = "RAGLOOP_CLOCK"
SCALED_FORM = "scaled:<epoch ISO>:<anchor unix>:<factor>"


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """Timezone-aware UTC."""
        ...

    def __call__(self) -> datetime: ...


class SystemClock:
    rate = 1.0

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now()

    def __repr__(self) -> str:
        return "system"


class ManualClock:
    """A clock that moves only when told to (`advance`, `set`): tests."""

    rate = 1.0

    def __init__(self, start: datetime | None = None) -> None:
        self._now = _aware(start) if start is not None else datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def __call__(self) -> datetime:
        return self._now

    def advance(self, seconds: float = 0.0, *, days: float = 0.0) -> datetime:
        if seconds < 0 or days < 0:
            raise ValueError("a clock does not run backwards")
        self._now += timedelta(seconds=seconds, days=days)
        return self._now

    def set(self, when: datetime) -> datetime:
        when = _aware(when)
        if when < self._now:
            raise ValueError(f"a clock does not run backwards ({when} < {self._now})")
        self._now = when
        return self._now


class ScaledClock:
    """Reads `epoch` at real time `anchor` and runs `factor` times faster than real time."""

    def __init__(self, epoch: datetime, anchor: float, factor: float, real: Callable[[], float] = time.time) -> None:
        if factor <= 0:
            raise ValueError("a scaled clock's factor must be positive")
        self.epoch, self.anchor, self.factor, self._real = _aware(epoch), float(anchor), float(factor), real

    @property
    def rate(self) -> float:
        return self.factor

    def now(self) -> datetime:
        return self.epoch + timedelta(seconds=(self._real() - self.anchor) * self.factor)

    def __call__(self) -> datetime:
        return self.now()

    def spec(self) -> str:
        """The `RAGLOOP_CLOCK` value that makes another process read this same clock."""
        return f"scaled:{self.epoch.isoformat()}:{self.anchor!r}:{self.factor!r}"

    def __repr__(self) -> str:
        return self.spec()


def parse_clock(spec: str | None) -> Clock:
    """A clock from its `RAGLOOP_CLOCK` spelling (see the module doc); a clear error otherwise."""
    text = (spec or "").strip()
    if text in ("", "system"):
        return SystemClock()
    kind, _, rest = text.partition(":")
    if kind == "scaled":
        # the ISO epoch has colons of its own: anchor and factor are the last two fields
        head, _, factor = rest.rpartition(":")
        epoch, _, anchor = head.rpartition(":")
        try:
            return ScaledClock(datetime.fromisoformat(epoch), float(anchor), float(factor))
        except ValueError as exc:
            raise ValueError(f"{CLOCK_ENV}={spec!r}: expected {SCALED_FORM} ({exc})") from None
    raise ValueError(f"{CLOCK_ENV}={spec!r}: expected 'system' or '{SCALED_FORM}'")


_PROCESS: tuple[str, Clock] | None = None


def process_clock() -> Clock:
    """The clock `RAGLOOP_CLOCK` names (re-read when the variable changes; parsed once per value)."""
    global _PROCESS
    spec = os.environ.get(CLOCK_ENV, "")
    if _PROCESS is None or _PROCESS[0] != spec:
        _PROCESS = (spec, parse_clock(spec))
    return _PROCESS[1]


class ConfiguredClock:
    """The process clock as a value that can be a default argument: each reading asks `process_clock()`."""

    @property
    def rate(self) -> float:
        return clock_rate(process_clock())

    def now(self) -> datetime:
        return process_clock().now()

    def __call__(self) -> datetime:
        return process_clock().now()

    def __repr__(self) -> str:
        return f"configured({process_clock()!r})"


CONFIGURED_CLOCK = ConfiguredClock()


def utc_now() -> datetime:
    """Now on the process clock."""
    return process_clock().now()


def clock_rate(clock: object) -> float:
    """Clock seconds per real second (1 for any clock that does not say)."""
    rate = getattr(clock, "rate", 1.0)
    return float(rate) if isinstance(rate, int | float) and rate > 0 else 1.0


def on_clock(clock: object, real_seconds: float) -> timedelta:
    """A wall-time duration (a lease, a backoff) as a span of `clock` time."""
    return timedelta(seconds=real_seconds * clock_rate(clock))


def real_seconds(clock: object, clock_seconds: float) -> float:
    """A span of `clock` time (an interval between periodic rounds) in real seconds."""
    return clock_seconds / clock_rate(clock)


def day_start(when: datetime) -> datetime:
    """Midnight UTC of `when`'s day: the bucket "per day" windows count in."""
    when = _aware(when).astimezone(UTC)
    return when.replace(hour=0, minute=0, second=0, microsecond=0)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
