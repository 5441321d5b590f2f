"""Promotion of an experiment's treatment: claimed once, smoke-tested, switched, audited.

1. **Claim**: a conditional UPDATE moves the experiment from `running` to `promoting`; of two
   servers aggregating the same experiment only one gets the row, the other does nothing (no
   double promotion — tested on PostgreSQL with two threads).
2. **Smoke test** (`SmokeTest`, the caller's: the service runs the golden set's non-held-out
   entries through the treatment): on failure the promotion is aborted, the experiment is
   `stopped` with the reason, and the audit log says why.
3. **Switch**: `pipelines.activate(treatment, via=experiment)` — one transaction, so a crash
   leaves exactly one current version; the previous one is remembered for instant rollback.
   `quality_at_promotion` holds the treatment's per-metric means.
4. **Record**: `promoting` → `promoted`, and an audit entry with the full evidence.

The maintenance window (`MaintenanceWindow`, UTC hours; none = any time) is checked by the caller
before step 1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ragloop.experiments.activation_audit import experiment_expectation
from ragloop.experiments.assignment import ExperimentStatus
from ragloop.experiments.versions import PromotedVia

if TYPE_CHECKING:
    from ragloop.experiments.registry import Clock
    from ragloop.store import Store


@dataclass(frozen=True)
class SmokeResult:
    passed: bool
    detail: dict[str, Any]


SmokeTest = Callable[[str], SmokeResult]
"""version id -> did the golden-set smoke test pass on it."""


@dataclass(frozen=True)
class MaintenanceWindow:
    """[start_hour, end_hour) in UTC; wraps midnight when start > end ("22-4")."""

    start_hour: int
    end_hour: int

    @classmethod
    def parse(cls, text: str | None) -> MaintenanceWindow | None:
        """ "HH-HH" or empty / "any" (None: any time)."""
        if not text or text.strip().lower() in ("any", "always", "*"):
            return None
        try:
            a, b = (int(x) for x in text.split("-"))
        except ValueError:
            raise ValueError(f"a maintenance window is 'HH-HH' in UTC, got {text!r}") from None
        if not (0 <= a <= 23 and 0 <= b <= 24):
            raise ValueError(f"maintenance window hours must lie in 0..24, got {text!r}")
        return cls(a, b)

    def is_open(self, now: datetime) -> bool:
        h = now.hour
        if self.start_hour <= self.end_hour:
            return self.start_hour <= h < self.end_hour
        return h >= self.start_hour or h < self.end_hour

    def __str__(self) -> str:
        return f"{self.start_hour:02d}-{self.end_hour:02d} UTC"


@dataclass(frozen=True)
class PromotionOutcome:
    promoted: bool
    status: str
    reason: str
    version: str | None = None
    previous_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "promoted": self.promoted,
            "status": self.status,
            "reason": self.reason,
            "version": self.version,
            "previous_version": self.previous_version,
        }


def _quality(evidence: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, entry in (evidence.get("metrics") or {}).items():
        mean = (entry.get("treatment") or {}).get("mean")
        if isinstance(mean, int | float):
            out[name] = float(mean)
    return out


def promote_experiment(
    store: Store,
    experiment_id: str,
    *,
    evidence: Mapping[str, Any],
    clock: Clock,
    smoke_test: SmokeTest | None = None,
    actor: str = "aggregator",
    via: PromotedVia = PromotedVia.EXPERIMENT,
    from_statuses: tuple[ExperimentStatus, ...] = (ExperimentStatus.RUNNING,),
) -> PromotionOutcome:
    """Claim, smoke-test, switch and record (see the module docstring). Never raises for a lost race."""
    row = store.experiments.get(experiment_id)
    if row is None:
        raise LookupError(f"no experiment {experiment_id!r}")
    if not store.experiments.transition(
        experiment_id, from_statuses=[s.value for s in from_statuses], to=ExperimentStatus.PROMOTING.value
    ):
        return PromotionOutcome(False, str(store.experiments.get(experiment_id).status), "another promoter holds it")  # type: ignore[union-attr]
    treatment = row.treatment_version
    assert treatment is not None
    smoke = (
        smoke_test(treatment) if smoke_test is not None else SmokeResult(True, {"skipped": "no smoke test configured"})
    )
    if not smoke.passed:
        reason = "golden-set smoke test failed; promotion aborted"
        store.experiments.transition(
            experiment_id,
            from_statuses=[ExperimentStatus.PROMOTING.value],
            to=ExperimentStatus.STOPPED.value,
            reason=reason,
            when=clock(),
            final=True,
        )
        store.audit.record(
            "experiment_promotion_aborted",
            triggered_by=reason,
            actor=actor,
            evidence={"experiment_id": experiment_id, "smoke_test": smoke.detail, "results": dict(evidence)},
            pipeline_version_before=row.control_version,
            pipeline_version_after=treatment,
        )
        return PromotionOutcome(False, ExperimentStatus.STOPPED.value, reason, treatment)
    before = store.pipelines.current()
    store.pipelines.activate(
        treatment,
        actor=actor,
        reason=f"experiment {row.name} ({experiment_id})",
        evidence={"experiment_id": experiment_id, "smoke_test": smoke.detail, "results": dict(evidence)},
        quality=_quality(evidence),
        via=via.value,
        expected_delta=experiment_expectation(evidence),
    )
    now = clock()
    store.experiments.transition(
        experiment_id,
        from_statuses=[ExperimentStatus.PROMOTING.value],
        to=ExperimentStatus.PROMOTED.value,
        reason="promoted",
        when=now,
        final=True,
    )
    store.experiments.mark_promoted(experiment_id, when=now)
    return PromotionOutcome(
        True, ExperimentStatus.PROMOTED.value, "promoted", treatment, before.version_id if before else None
    )
