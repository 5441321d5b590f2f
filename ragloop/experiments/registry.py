"""Experiments as records: a validated spec, creation (both arms registered as candidate versions),
and the admin's stop / reject. Aggregation and promotion live in `aggregation` and `promotion`.

`ExperimentSpec` is what `POST /v1/experiments` and `ragloop experiments create` accept. It
refuses, with the reason: an unknown metric, a split outside (0, 0.5], unknown config keys, and
a control that is the same pipeline as the treatment (compared by version id, i.e. after the
overrides are applied, so `{}` vs `{"retrieval": {"k": 5}}` — the default — is refused too).
An arm is either config overrides of the current version or an existing version id.

One experiment runs at a time: a session's variant is then a function of one experiment, and two
experiments never split the same traffic against different controls. The database enforces it
(a partial unique index, migration 0005), so two servers creating one each cannot both succeed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragloop.config.clock import process_clock
from ragloop.experiments.assignment import ExperimentStatus
from ragloop.experiments.metrics import Metric, parse_metric
from ragloop.experiments.stats import check_split
from ragloop.experiments.versions import ConfigError, register_candidate
from ragloop.store import StoreConflictError

if TYPE_CHECKING:
    from ragloop.store import Experiment, Store

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """Now on the process clock (`RAGLOOP_CLOCK`): experiments' durations and windows are on it."""
    return process_clock().now()


class ExperimentError(ValueError):
    """An experiment that cannot be created as asked (the API answers 422 with this message)."""


class ExperimentConflictError(RuntimeError):
    """The experiment's state forbids the change (the API answers 409)."""


Arm = dict[str, Any] | str


class ExperimentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    control: Arm = Field(default_factory=dict, description="config overrides of the current version, or a version id")
    treatment: Arm
    traffic_split: float = Field(default=0.05, description="treatment share, in (0, 0.5]")
    min_sample_size: int = Field(default=500, ge=2, description="answers per arm before a decision")
    min_duration: float = Field(default=86400.0, ge=0, description="seconds before a promotion (24 h)")
    primary_metric: Metric = Metric.TIER1_SCORE
    min_effect: float = Field(default=0.02, ge=0)
    guardrail_metrics: list[Metric] = Field(default_factory=lambda: [Metric.FAITHFULNESS, Metric.LATENCY_P99])

    @field_validator("traffic_split")
    @classmethod
    def _split(cls, v: float) -> float:
        return check_split(v)

    @field_validator("primary_metric", mode="before")
    @classmethod
    def _metric(cls, v: Any) -> Metric:
        return parse_metric(str(v))

    @field_validator("guardrail_metrics", mode="before")
    @classmethod
    def _guards(cls, v: Any) -> list[Metric]:
        if not isinstance(v, list | tuple):
            raise ValueError("guardrail_metrics must be a list of metric names")
        return list(dict.fromkeys(parse_metric(str(m)) for m in v))


def _resolve(store: Store, arm: Arm, label: str, actor: str, name: str) -> str:
    if isinstance(arm, str):
        if store.pipelines.get(arm) is None:
            raise ExperimentError(f"{label}: no pipeline version {arm!r}")
        return arm
    try:
        row = register_candidate(store, arm, created_by=actor, description=f"experiment {name}: {label}")
    except ConfigError as exc:
        raise ExperimentError(f"{label}: {exc}") from None
    return row.version_id


def create_experiment(store: Store, spec: ExperimentSpec, *, actor: str, clock: Clock = utc_now) -> Experiment:
    """Validate, register both arms as candidates, store the experiment (running) and audit it."""
    control = _resolve(store, spec.control, "control", actor, spec.name)
    treatment = _resolve(store, spec.treatment, "treatment", actor, spec.name)
    if control == treatment:
        raise ExperimentError(f"control = treatment: both arms are pipeline version {control}")
    running = store.experiments.list_experiments(status=ExperimentStatus.RUNNING)
    if running:
        raise ExperimentConflictError(f"experiment {running[0].experiment_id} ({running[0].name}) is still running")
    try:
        row = _insert(store, spec, control, treatment, actor, clock)
    except StoreConflictError:  # another server started one between the read above and this write
        raise ExperimentConflictError("another experiment started running meanwhile") from None
    store.audit.record(
        "experiment_create",
        triggered_by=spec.name,
        actor=actor,
        evidence={"experiment_id": row.experiment_id, "spec": spec.model_dump(mode="json")},
        pipeline_version_before=control,
        pipeline_version_after=treatment,
    )
    return row


def _insert(store: Store, spec: ExperimentSpec, control: str, treatment: str, actor: str, clock: Clock) -> Experiment:
    return store.experiments.create(
        spec.name,
        control_config=spec.control if isinstance(spec.control, dict) else {"version": spec.control},
        treatment_config=spec.treatment if isinstance(spec.treatment, dict) else {"version": spec.treatment},
        primary_metric=spec.primary_metric.value,
        traffic_split=spec.traffic_split,
        min_sample_size=spec.min_sample_size,
        guardrail_metrics=[m.value for m in spec.guardrail_metrics],
        control_version=control,
        treatment_version=treatment,
        min_duration_s=spec.min_duration,
        min_effect=spec.min_effect,
        created_by=actor,
        started_at=clock(),
    )


def end_experiment(
    store: Store, experiment_id: str, to: ExperimentStatus, *, actor: str, reason: str, clock: Clock = utc_now
) -> Experiment:
    """Stop (no verdict) or reject (keep control) a running or halted experiment; audited."""
    row = store.experiments.get(experiment_id)
    if row is None:
        raise LookupError(f"no experiment {experiment_id!r}")
    allowed = (ExperimentStatus.RUNNING, ExperimentStatus.HALTED)
    if not store.experiments.transition(
        experiment_id, from_statuses=allowed, to=to.value, reason=reason, when=clock(), final=True
    ):
        raise ExperimentConflictError(
            f"experiment {experiment_id} is {row.status}; only a running or halted one can be {to.value}"
        )
    store.audit.record(
        f"experiment_{to.value}",
        triggered_by=reason,
        actor=actor,
        evidence={"experiment_id": experiment_id, "results": row.results},
        pipeline_version_before=row.control_version,
        pipeline_version_after=row.treatment_version,
    )
    out = store.experiments.get(experiment_id)
    assert out is not None
    return out


def running_experiment(store: Store) -> Experiment | None:
    rows = store.experiments.list_experiments(status=ExperimentStatus.RUNNING)
    return rows[0] if rows else None
