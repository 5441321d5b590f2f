"""The simulation's report reads each switch of the current version against the held-out test: the
measurement before the switch vs the first the new version served alone, paired on the same items."""

from __future__ import annotations

from ragloop.evaluation.summary import ConfigRun
from ragloop.improve.simulation.measure import Measurement
from ragloop.improve.simulation.report import arm_section, switch_effects
from ragloop.improve.simulation.run import ArmConfig, ArmResult


def _day(day: int, versions: dict[str, int], right: int, n: int = 40) -> Measurement:
    run = ConfigRun("squad", f"day-{day}", {}, [])
    run.pairs = {f"q{i}": {"e2e_accuracy": (1.0 if i < right else 0.0, 1.0)} for i in range(n)}
    return Measurement(day, f"2026-03-0{day + 2}T00:00:00+00:00", versions, run, 0.0, 0.0)


def _arm() -> ArmResult:
    arm = ArmResult(ArmConfig(label="squad-defaults"), split="test")
    arm.measurements = [
        _day(0, {"pv-a": 40}, 10),
        _day(1, {"pv-a": 40}, 10),
        _day(2, {"pv-a": 20, "pv-b": 20}, 14),  # an experiment: both served, not the switch's "after"
        _day(3, {"pv-b": 40}, 20),
    ]
    expected = {"metric": "answer_correct", "value": 0.19, "ci95": [0.07, 0.32], "n": 100}
    arm.audit = [
        {
            "at": "2026-03-01T22:00:00+00:00",
            "action": "pipeline_activate",
            "version_before": None,
            "version_after": "pv-a",
            "expected_delta": None,
            "actual_delta": None,
            "triggered_by": "start",
        },
        {
            "at": "2026-03-03T17:44:56+00:00",
            "action": "pipeline_activate",
            "version_before": "pv-a",
            "version_after": "pv-b",
            "expected_delta": expected,
            "actual_delta": None,
            "triggered_by": "golden",
        },
    ]
    return arm


def test_a_switch_is_read_against_the_days_around_it() -> None:
    [effect] = switch_effects(_arm())  # the start has nothing before it
    assert (effect["from_day"], effect["to_day"]) == (1, 3)
    held = effect["heldout"]["e2e_accuracy"]
    assert held["n"] == 40 and abs(held["diff"] - 0.25) < 1e-9 and held["lo"] > 0
    assert effect["expected_delta"]["value"] == 0.19
    row = next(line for line in arm_section(_arm()) if "(day 1 → 3)" in line)
    assert "| answer_correct +19.0 pt [+7.0, +32.0] n=100 | +25.0 pt [" in row


def _entry(at: str, action: str, by: str, after: str | None = None) -> dict[str, object]:
    return {
        "at": at,
        "action": action,
        "version_before": None,
        "version_after": after,
        "expected_delta": None,
        "actual_delta": None,
        "triggered_by": by,
    }


def test_the_timeline_folds_a_run_of_plain_entries_but_never_a_switch() -> None:
    arm = _arm()
    seeded = [_entry(f"2026-03-01T21:0{i}:00+00:00", "golden_add", "POST /v1/golden") for i in range(3)]
    arm.audit = [*seeded, *arm.audit, _entry("2026-03-04T00:00:00+00:00", "golden_add", "POST /v1/golden")]
    lines = arm_section(arm)
    start = next(i for i, line in enumerate(lines) if line.startswith("Audit timeline")) + 4
    rows = lines[start : lines.index("", start)]
    assert rows[0].startswith("| 2026-03-01T21:00:00+00:00 … 2026-03-01T21:02:00+00:00 | golden_add ×3 |")
    # the two activations stay one row each (each switches a version), and a later add is its own run
    assert [r.split(" | ")[1] for r in rows] == [
        "golden_add ×3",
        "pipeline_activate",
        "pipeline_activate",
        "golden_add",
    ]
