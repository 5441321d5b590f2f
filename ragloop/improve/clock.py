"""The loop's one clock: every window (remediation caps per day, the auditor's wait, later the
tier-2 sampling day and experiments' minimum duration) reads a `Clock`, so a simulation or a test
compresses days into seconds through the code paths production runs. No `if simulated:`.

A clock is also a zero-argument callable returning the time, so it can be handed to the store's
repositories and queue, which take `clock: Callable[[], datetime]`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        """Timezone-aware UTC."""
        ...

    def __call__(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now()


class ManualClock:
    """A clock that moves only when told to (`advance`, `set`): tests and the simulation."""

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


def day_start(when: datetime) -> datetime:
    """Midnight UTC of `when`'s day: the bucket "per day" windows count in."""
    when = _aware(when).astimezone(UTC)
    return when.replace(hour=0, minute=0, second=0, microsecond=0)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


SYSTEM_CLOCK = SystemClock()
