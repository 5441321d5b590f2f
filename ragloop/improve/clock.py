"""The loop's one clock, as `ragloop.improve` names it: the process clock of `ragloop.config.clock`
(the system's, unless `RAGLOOP_CLOCK` configures a scaled one for a simulation). Every window of the
loop reads it, so a simulation or a test compresses days into seconds through the code paths
production runs. No `if simulated:`.
"""

from __future__ import annotations

from ragloop.config.clock import (
    CONFIGURED_CLOCK,
    Clock,
    ManualClock,
    ScaledClock,
    SystemClock,
    day_start,
    on_clock,
    parse_clock,
    process_clock,
    real_seconds,
)

SYSTEM_CLOCK: Clock = CONFIGURED_CLOCK
"""The default every loop component takes: the process clock (system time unless `RAGLOOP_CLOCK` says)."""

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "ManualClock",
    "ScaledClock",
    "SystemClock",
    "day_start",
    "on_clock",
    "parse_clock",
    "process_clock",
    "real_seconds",
]
