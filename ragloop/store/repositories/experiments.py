"""A/B experiments and golden-set regression runs: the two records of how a pipeline change measured
up, online and offline, kept together because both feed promotion and rollback decisions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from ragloop.store.db import Database
from ragloop.store.models import Experiment, RegressionRun, utcnow
from ragloop.store.repositories._base import METRICS, StoreConflictError, _require

_UNSET: Any = object()


class Experiments:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create(
        self,
        name: str,
        *,
        control_config: Mapping[str, Any],
        treatment_config: Mapping[str, Any],
        primary_metric: str,
        traffic_split: float = 0.05,
        min_sample_size: int = 500,
        guardrail_metrics: Sequence[str] = (),
        control_version: str | None = None,
        treatment_version: str | None = None,
        min_duration_s: float = 86400.0,
        min_effect: float = 0.02,
        created_by: str | None = None,
        started_at: datetime | None = None,
    ) -> Experiment:
        if not 0.0 < traffic_split < 1.0:
            raise ValueError(f"traffic_split must be in (0, 1), got {traffic_split}")
        if min_duration_s < 0 or min_effect < 0:
            raise ValueError("min_duration_s and min_effect must be >= 0")
        try:
            return self._insert(
                name=name,
                control_config=dict(control_config),
                treatment_config=dict(treatment_config),
                control_version=control_version,
                treatment_version=treatment_version,
                traffic_split=traffic_split,
                min_sample_size=min_sample_size,
                primary_metric=primary_metric,
                guardrail_metrics=list(guardrail_metrics),
                min_duration_s=float(min_duration_s),
                min_effect=float(min_effect),
                created_by=created_by,
                started_at=started_at or utcnow(),
            )
        except IntegrityError as exc:
            if "uq_experiments_one_running" in str(exc) or "experiments.status" in str(exc):
                raise StoreConflictError("another experiment is already running") from None
            raise

    def _insert(self, **values: Any) -> Experiment:
        with self.db.transaction() as s:
            row = Experiment(**values)
            s.add(row)
            s.flush()
            return row

    def get(self, experiment_id: str) -> Experiment | None:
        with self.db.transaction(write=False) as s:
            return s.get(Experiment, experiment_id)

    def list_experiments(self, *, status: str | None = None) -> list[Experiment]:
        stmt = select(Experiment)
        if status is not None:
            stmt = stmt.where(Experiment.status == status)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(Experiment.created_at.desc(), Experiment.experiment_id)))

    def record_results(
        self,
        experiment_id: str,
        *,
        status: str,
        p_value: float | None = None,
        control_sample: int | None = None,
        treatment_sample: int | None = None,
        recommendation: str | None = None,
        results: Mapping[str, Any] | None = None,
        auto_promote_at: datetime | None = _UNSET,
    ) -> Experiment:
        """Store the latest aggregation (status: running | significant | no_effect | guardrail_breached | …)."""
        with self.db.transaction() as s:
            row = _require(s, Experiment, experiment_id)
            row.status = status
            row.p_value = p_value if p_value is not None else row.p_value
            if control_sample is not None:
                row.control_sample = control_sample
            if treatment_sample is not None:
                row.treatment_sample = treatment_sample
            if recommendation is not None:
                row.recommendation = recommendation
            if results is not None:
                row.results = dict(results)
            if auto_promote_at is not _UNSET:
                row.auto_promote_at = auto_promote_at
            row.updated_at = utcnow()
            s.flush()
            return row

    def transition(
        self,
        experiment_id: str,
        *,
        from_statuses: Sequence[str],
        to: str,
        reason: str | None = None,
        when: datetime | None = None,
        final: bool = False,
    ) -> bool:
        """Move the status with one conditional UPDATE (`... WHERE status IN from_statuses`): of two
        servers racing to promote, halt or stop the same experiment exactly one gets True."""
        values: dict[str, Any] = {"status": to, "updated_at": utcnow()}
        if reason is not None:
            values["status_reason"] = reason
        if final:
            values["ended_at"] = when or utcnow()
        with self.db.transaction() as s:
            result = s.execute(
                update(Experiment)
                .where(Experiment.experiment_id == experiment_id, Experiment.status.in_(list(from_statuses)))
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            return bool(getattr(result, "rowcount", 0) == 1)

    def mark_promoted(self, experiment_id: str, *, when: datetime | None = None) -> Experiment:
        with self.db.transaction() as s:
            row = _require(s, Experiment, experiment_id)
            row.status, row.promoted_at = "promoted", when or utcnow()
            row.updated_at = utcnow()
            s.flush()
            return row


class RegressionRuns:
    def __init__(self, db: Database) -> None:
        self.db = db

    def start(
        self,
        *,
        golden_set_version: int,
        pipeline_version: str,
        baseline: Mapping[str, float] | None = None,
        when: datetime | None = None,
    ) -> RegressionRun:
        """`when`: the caller's clock (the loop's, so a simulated night is a night); default now."""
        base = dict(baseline or {})
        with self.db.transaction() as s:
            row = RegressionRun(
                started_at=when or utcnow(),
                golden_set_version=golden_set_version,
                pipeline_version=pipeline_version,
                baseline=base,
                baseline_faithfulness=base.get("faithfulness"),
            )
            s.add(row)
            s.flush()
            return row

    def finish(
        self,
        run_id: str,
        *,
        metrics: Mapping[str, float],
        regression_detected: bool,
        rollback_triggered: bool = False,
        status: str = "completed",
        report: Mapping[str, Any] | None = None,
        when: datetime | None = None,
    ) -> RegressionRun:
        with self.db.transaction() as s:
            row = _require(s, RegressionRun, run_id)
            if row.completed_at is not None:
                raise StoreConflictError(f"regression run {run_id} already finished")
            row.metrics = dict(metrics)
            for m in METRICS:
                setattr(row, f"{m}_mean", metrics.get(m))
            row.regression_detected = regression_detected
            row.rollback_triggered = rollback_triggered
            row.run_status = status
            row.report = dict(report or {})
            row.completed_at = when or utcnow()
            s.flush()
            return row

    def get(self, run_id: str) -> RegressionRun | None:
        with self.db.transaction(write=False) as s:
            return s.get(RegressionRun, run_id)

    def latest(self, *, pipeline_version: str | None = None, status: str | None = "completed") -> RegressionRun | None:
        stmt = select(RegressionRun)
        if pipeline_version is not None:
            stmt = stmt.where(RegressionRun.pipeline_version == pipeline_version)
        if status is not None:
            stmt = stmt.where(RegressionRun.run_status == status)
        with self.db.transaction(write=False) as s:
            return s.scalar(stmt.order_by(RegressionRun.started_at.desc(), RegressionRun.run_id).limit(1))

    def list_runs(self, *, limit: int = 50) -> list[RegressionRun]:
        with self.db.transaction(write=False) as s:
            stmt = select(RegressionRun).order_by(RegressionRun.started_at.desc(), RegressionRun.run_id)
            return list(s.scalars(stmt.limit(limit)))
