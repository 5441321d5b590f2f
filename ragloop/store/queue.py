"""The durable evaluation queue (`evaluation_jobs`): leases, retries with backoff, dead letters.

Life of a job::

    enqueue ──► queued ──claim──► leased ──complete──► done
                  ▲                  │ fail (attempts left): back to queued, due after a backoff
                  │                  │ fail (no attempts left, or not retryable) ──► dead (with the reason)
                  └── lease expired ─┘ (the worker died or overran): claimable again; on the last attempt ──► dead

- One job per (answer_id, tier): `enqueue` is idempotent.
- `claim` takes the oldest due job atomically: `SELECT … FOR UPDATE SKIP LOCKED` inside the UPDATE on
  PostgreSQL (claimers never wait on each other); on SQLite the same single UPDATE … RETURNING runs
  inside `BEGIN IMMEDIATE`, which serialises claimers on the database write lock.
- Each claim draws a fresh `lease_token`. `complete`, `fail` and `extend_lease` need the worker id, the
  token and an unexpired lease; otherwise they raise `LeaseLostError` and change nothing. A worker that
  stalled past its lease therefore cannot complete a job someone else now holds.
- Jobs no worker claims (tier `human`, held candidates) are read with `count` / `listed` and settled
  with `close` (held candidates) or `settle` (a review submitted); `exclusive(name)` serialises a
  decision that reads and writes many of them.
- Exactly-once results: write the result and call `complete` in one transaction, so a lost lease
  rolls the result back too::

      with db.transaction():
          evaluations.add(job.answer_id, Tier.HEURISTIC, scores=...)
          queue.complete(job.job_id, worker_id, job.lease_token)

Times come from the application clock (`clock`, UTC), so tests can move time, and every process that
shares a queue should keep its clock in sync (NTP); leases are seconds to minutes, far above skew.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import Table, and_, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from ragloop.config.clock import CONFIGURED_CLOCK, on_clock
from ragloop.store.db import Database
from ragloop.store.models import JOB_STATUSES, Answer, EvaluationJob, new_id
from ragloop.store.repositories import NotFoundError
from ragloop.store.repositories._base import _serialize
from ragloop.store.vocabulary import PENDING, JobStatus

JOBS = cast(Table, EvaluationJob.__table__)
J = JOBS.c
MAX_ERROR_CHARS = 4000


class LeaseLostError(RuntimeError):
    """The caller no longer holds the job's lease (expired, reclaimed, finished, or never held)."""


@dataclass(frozen=True)
class Job:
    job_id: str
    answer_id: str
    tier: str
    payload: dict[str, Any]
    status: str
    attempts: int
    max_attempts: int
    available_at: datetime
    created_at: datetime
    updated_at: datetime
    leased_by: str | None
    lease_token: str | None
    lease_expires_at: datetime | None
    last_error: str | None
    dead_reason: str | None
    completed_at: datetime | None

    @classmethod
    def from_mapping(cls, row: RowMapping | Mapping[str, Any]) -> Job:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    @classmethod
    def from_row(cls, row: EvaluationJob) -> Job:
        return cls(**{name: getattr(row, name) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class QueueStats:
    """For metrics: job counts by status (and by tier), due jobs, and the evaluation lag."""

    counts: dict[str, int]
    by_tier: dict[str, dict[str, int]]
    due: int
    oldest_pending_age_s: float
    oldest_pending_by_tier: dict[str, datetime] = field(default_factory=dict)
    """Per tier, when its oldest unfinished job was created (tiers with none are left out)."""

    @property
    def depth(self) -> int:
        """Jobs not finished yet (queued + leased)."""
        return self.counts.get(JobStatus.QUEUED, 0) + self.counts.get(JobStatus.LEASED, 0)

    def pending(self, tiers: Sequence[str]) -> int:
        """Jobs of `tiers` not finished yet (queued + leased)."""
        return sum(self.by_tier.get(t, {}).get(s, 0) for t in tiers for s in PENDING)


class EvaluationQueue:
    """Evaluation jobs in the database. Thread-safe; any number of worker processes may share it."""

    def __init__(
        self,
        db: Database,
        *,
        max_attempts: int = 5,
        backoff_base_s: float = 2.0,
        backoff_max_s: float = 300.0,
        clock: Callable[[], datetime] = CONFIGURED_CLOCK,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.db = db
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.clock = clock

    # ---------------------------------------------------------------- producing

    def enqueue(
        self,
        answer_id: str,
        tier: str,
        payload: Mapping[str, Any] | None = None,
        *,
        max_attempts: int | None = None,
        delay_s: float = 0.0,
    ) -> Job:
        """Queue an evaluation of `answer_id` at `tier`; if that job already exists (in any state) it is
        returned unchanged. Raises NotFoundError for an unknown answer."""
        if not tier or len(tier) > 16:
            raise ValueError(f"tier must be a short non-empty name, got {tier!r}")
        now = self.clock()
        with self.db.transaction() as s:
            if s.get(Answer, answer_id) is None:
                raise NotFoundError(f"no answers row {answer_id!r}")
            insert = postgresql.insert if self.db.dialect == "postgresql" else sqlite.insert
            stmt = (
                insert(JOBS)
                .values(
                    job_id=new_id(),
                    answer_id=answer_id,
                    tier=tier,
                    payload=dict(payload or {}),
                    status=JobStatus.QUEUED,
                    attempts=0,
                    max_attempts=max_attempts or self.max_attempts,
                    available_at=now + on_clock(self.clock, delay_s),
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict_do_nothing(index_elements=["answer_id", "tier"])
            )
            s.execute(stmt)
            row = s.execute(select(JOBS).where(J.answer_id == answer_id, J.tier == tier)).mappings()
            return Job.from_mapping(row.one())

    # ---------------------------------------------------------------- consuming

    def claim(self, worker_id: str, lease_seconds: float = 60.0, *, tiers: Sequence[str] | None = None) -> Job | None:
        """Lease the oldest due job (queued and available, or leased with an expired lease) to
        `worker_id` for `lease_seconds`; None when nothing is due. Each claim counts as an attempt."""
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        now = self.clock()
        with self.db.transaction() as s:
            self._bury_expired(s, now)
            due = self._due(now)
            if tiers is not None:
                due = and_(due, J.tier.in_(list(tiers)))
            pick = select(J.job_id).where(due).order_by(J.available_at, J.created_at, J.job_id).limit(1)
            if self.db.dialect == "postgresql":
                pick = pick.with_for_update(skip_locked=True)
            stmt = (
                update(JOBS)
                .where(J.job_id == pick.scalar_subquery(), due)
                .values(
                    status=JobStatus.LEASED,
                    leased_by=worker_id,
                    lease_token=new_id(),
                    lease_expires_at=now + on_clock(self.clock, lease_seconds),
                    attempts=J.attempts + 1,
                    updated_at=now,
                )
                .returning(*JOBS.c)
            )
            row = s.execute(stmt).mappings().first()
            return Job.from_mapping(row) if row is not None else None

    @staticmethod
    def _due(now: datetime) -> ColumnElement[bool]:
        return or_(
            and_(J.status == JobStatus.QUEUED, J.available_at <= now),
            and_(J.status == JobStatus.LEASED, J.lease_expires_at <= now, J.attempts < J.max_attempts),
        )

    @staticmethod
    def _bury_expired(s: Session, now: datetime) -> None:
        """Dead-letter jobs whose last allowed attempt ended in an expired lease (crash or overrun)."""
        s.execute(
            update(JOBS)
            .where(J.status == JobStatus.LEASED, J.lease_expires_at <= now, J.attempts >= J.max_attempts)
            .values(
                status=JobStatus.DEAD,
                dead_reason="lease expired on the last attempt: the worker crashed or overran its lease",
                lease_expires_at=None,
                updated_at=now,
            )
        )

    def _held(self, s: Session, job_id: str, worker_id: str, lease_token: str, now: datetime) -> EvaluationJob:
        row = s.scalar(
            select(EvaluationJob)
            .where(
                EvaluationJob.job_id == job_id,
                EvaluationJob.status == JobStatus.LEASED,
                EvaluationJob.leased_by == worker_id,
                EvaluationJob.lease_token == lease_token,
                EvaluationJob.lease_expires_at > now,
            )
            .with_for_update()
        )
        if row is None:
            raise LeaseLostError(self._why_not_held(s, job_id, worker_id, lease_token, now))
        return row

    @staticmethod
    def _why_not_held(s: Session, job_id: str, worker_id: str, lease_token: str, now: datetime) -> str:
        row = s.get(EvaluationJob, job_id)
        if row is None:
            return f"no evaluation job {job_id!r}"
        if row.status != JobStatus.LEASED:
            return f"job {job_id} is {row.status}, not leased"
        if row.leased_by != worker_id or row.lease_token != lease_token:
            return f"job {job_id} is leased to {row.leased_by} under another lease"
        return f"the lease of {worker_id} on job {job_id} expired at {row.lease_expires_at}"

    def complete(self, job_id: str, worker_id: str, lease_token: str) -> Job:
        """Mark a leased job done. Raises LeaseLostError (and changes nothing) unless `worker_id` holds an
        unexpired lease with `lease_token`; inside a caller's transaction that also rolls back the result."""
        now = self.clock()
        with self.db.transaction() as s:
            row = self._held(s, job_id, worker_id, lease_token, now)
            row.status, row.completed_at, row.lease_expires_at, row.updated_at = JobStatus.DONE, now, None, now
            s.flush()
            return Job.from_row(row)

    def fail(self, job_id: str, worker_id: str, lease_token: str, error: str, *, retry: bool = True) -> Job:
        """Record a failed attempt. With attempts left (and `retry`), the job is queued again, due after
        an exponential backoff; otherwise it is dead-lettered with the reason. Raises LeaseLostError
        like `complete`."""
        now = self.clock()
        error = error[:MAX_ERROR_CHARS]
        with self.db.transaction() as s:
            row = self._held(s, job_id, worker_id, lease_token, now)
            row.last_error, row.updated_at, row.lease_expires_at = error, now, None
            if not retry:
                row.status, row.dead_reason = JobStatus.DEAD, f"not retryable (attempt {row.attempts}): {error}"
            elif row.attempts >= row.max_attempts:
                row.status = JobStatus.DEAD
                row.dead_reason = f"failed {row.attempts} of {row.max_attempts} attempts: {error}"
            else:
                row.status = JobStatus.QUEUED
                row.available_at = now + on_clock(self.clock, self.backoff_seconds(row.attempts))
            s.flush()
            return Job.from_row(row)

    def extend_lease(self, job_id: str, worker_id: str, lease_token: str, lease_seconds: float) -> Job:
        """Heartbeat for long jobs: the lease now ends `lease_seconds` from now."""
        now = self.clock()
        with self.db.transaction() as s:
            row = self._held(s, job_id, worker_id, lease_token, now)
            row.lease_expires_at, row.updated_at = now + on_clock(self.clock, lease_seconds), now
            s.flush()
            return Job.from_row(row)

    def backoff_seconds(self, attempts: int) -> float:
        """Delay before retry number `attempts` + 1: base · 2^(attempts-1), capped."""
        return float(min(self.backoff_max_s, self.backoff_base_s * 2 ** max(0, attempts - 1)))

    # ---------------------------------------------------------------- operating

    def get(self, job_id: str) -> Job | None:
        with self.db.transaction(write=False) as s:
            row = s.get(EvaluationJob, job_id)
            return Job.from_row(row) if row is not None else None

    def for_answer(self, answer_id: str) -> list[Job]:
        with self.db.transaction(write=False) as s:
            rows = s.scalars(
                select(EvaluationJob).where(EvaluationJob.answer_id == answer_id).order_by(EvaluationJob.tier)
            )
            return [Job.from_row(r) for r in rows]

    def dead_letters(self, *, limit: int = 100) -> list[Job]:
        """Dead jobs, most recent first, with `dead_reason` and `last_error`."""
        with self.db.transaction(write=False) as s:
            stmt = select(EvaluationJob).where(EvaluationJob.status == JobStatus.DEAD)
            rows = s.scalars(stmt.order_by(EvaluationJob.updated_at.desc(), EvaluationJob.job_id).limit(limit))
            return [Job.from_row(r) for r in rows]

    def hold_dead(self, job_id: str) -> Job | None:
        """Lock a dead job's row until the caller's transaction ends and return it; None when the job is
        not (or no longer) dead. For whoever records what a dead letter means exactly once."""
        with self.db.transaction() as s:
            row = s.scalar(
                select(EvaluationJob)
                .where(EvaluationJob.job_id == job_id, EvaluationJob.status == JobStatus.DEAD)
                .with_for_update()
            )
            return Job.from_row(row) if row is not None else None

    def requeue(self, job_id: str) -> Job:
        """Give a dead job a fresh set of attempts (after fixing what killed it)."""
        now = self.clock()
        with self.db.transaction() as s:
            row = s.scalar(select(EvaluationJob).where(EvaluationJob.job_id == job_id).with_for_update())
            if row is None:
                raise NotFoundError(f"no evaluation job {job_id!r}")
            if row.status != JobStatus.DEAD:
                raise ValueError(f"job {job_id} is {row.status}; only dead jobs are requeued")
            row.status, row.attempts, row.available_at, row.updated_at = JobStatus.QUEUED, 0, now, now
            row.dead_reason = None
            s.flush()
            return Job.from_row(row)

    def count(
        self,
        tier: str | None = None,
        *,
        statuses: Sequence[str] = (JobStatus.QUEUED,),
        since: datetime | None = None,
        until: datetime | None = None,
        by: Literal["created_at", "completed_at"] = "created_at",
    ) -> int:
        """Jobs of `tier` (every tier when None) in `statuses` whose `by` time is in [since, until):
        `count(Tier.HUMAN)` is the review queue's size."""
        with self.db.transaction(write=False) as s:
            where = self._where(tier, statuses, since, until, by)
            return int(s.scalar(select(func.count()).select_from(JOBS).where(where)) or 0)

    def listed(
        self,
        tier: str,
        *,
        statuses: Sequence[str] = (JobStatus.QUEUED,),
        since: datetime | None = None,
        limit: int = 10_000,
    ) -> list[Job]:
        """Jobs of `tier` in `statuses` created since `since`, oldest first."""
        with self.db.transaction(write=False) as s:
            where = self._where(tier, statuses, since, None, "created_at")
            stmt = select(JOBS).where(where).order_by(J.created_at, J.job_id).limit(limit)
            return [Job.from_mapping(r) for r in s.execute(stmt).mappings()]

    @staticmethod
    def _where(
        tier: str | None, statuses: Sequence[str], since: datetime | None, until: datetime | None, by: str
    ) -> ColumnElement[bool]:
        conds: list[ColumnElement[bool]] = [J.status.in_(list(statuses))]
        conds += [J.tier == tier] if tier is not None else []
        conds += [J[by] >= since] if since is not None else []
        conds += [J[by] < until] if until is not None else []
        return and_(*conds)

    def close(self, job_ids: Sequence[str]) -> int:
        """Mark queued jobs done without a lease: jobs that no worker claims (held candidates) are
        settled by whoever decides them. Jobs not queued are left alone; returns how many changed."""
        now = self.clock()
        with self.db.transaction() as s:
            result = s.execute(
                update(JOBS)
                .where(J.job_id.in_(list(job_ids)), J.status == JobStatus.QUEUED)
                .values(status=JobStatus.DONE, completed_at=now, updated_at=now)
            )
            return int(getattr(result, "rowcount", 0) or 0)

    def settle(self, answer_id: str, tier: str) -> int:
        """Mark the answer's `tier` job done, queued or leased, without a lease: for a job a person
        answers (a review submitted for a `human` job). Returns how many changed (0 or 1)."""
        now = self.clock()
        with self.db.transaction() as s:
            result = s.execute(
                update(JOBS)
                .where(J.answer_id == answer_id, J.tier == tier, J.status.in_(PENDING))
                .values(status=JobStatus.DONE, completed_at=now, updated_at=now, lease_expires_at=None)
            )
            return int(getattr(result, "rowcount", 0) or 0)

    @contextmanager
    def exclusive(self, name: str) -> Iterator[Session]:
        """A write transaction that holds the lock `name` until it ends (an advisory lock on
        PostgreSQL; the write lock on SQLite), for decisions that read then write many jobs at once.
        Queue calls inside it join the transaction."""
        with self.db.transaction() as s:
            _serialize(s, f"queue:{name}")
            yield s

    def depth(self) -> dict[str, int]:
        """Job counts by status (every status present, zeros included)."""
        with self.db.transaction(write=False) as s:
            rows = s.execute(select(J.status, func.count()).group_by(J.status)).all()
        counts = dict.fromkeys(JOB_STATUSES, 0)
        counts.update({status: int(n) for status, n in rows})
        return counts

    def lag_seconds(self) -> float:
        """Age of the oldest unfinished job (0 when the queue is drained): the evaluation lag."""
        with self.db.transaction(write=False) as s:
            oldest = s.scalar(select(func.min(J.created_at)).where(J.status.in_(PENDING)))
        return max(0.0, (self.clock() - oldest).total_seconds()) if oldest is not None else 0.0

    def stats(self) -> QueueStats:
        now = self.clock()
        with self.db.transaction(write=False) as s:
            rows = s.execute(select(J.tier, J.status, func.count()).group_by(J.tier, J.status)).all()
            due = s.scalar(select(func.count()).select_from(JOBS).where(self._due(now))) or 0
            oldest_by_tier = s.execute(
                select(J.tier, func.min(J.created_at)).where(J.status.in_(PENDING)).group_by(J.tier)
            ).all()
        oldest = min((at for _, at in oldest_by_tier if at is not None), default=None)
        counts = dict.fromkeys(JOB_STATUSES, 0)
        by_tier: dict[str, dict[str, int]] = {}
        for tier, status, n in rows:
            counts[status] += int(n)
            by_tier.setdefault(tier, dict.fromkeys(JOB_STATUSES, 0))[status] = int(n)
        lag = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
        return QueueStats(
            counts=counts,
            by_tier=by_tier,
            due=int(due),
            oldest_pending_age_s=lag,
            oldest_pending_by_tier={str(tier): at for tier, at in oldest_by_tier if at is not None},
        )
