"""One remediation pass: audit what is due, then schedule and apply what is proposed.

`run_pass` is what `ragloop improve run` and the service worker call after diagnosis. Auditing
comes first so that a component whose change was just judged is free again and a raised evidence
threshold already applies to this pass's proposals; then tier 1's weekly agreement check and label
buffer (`recalibration.watch`: it may propose a recalibration or put tier 1 in monitor mode).
`revert_action` is the admin's undo (`POST /v1/improvements/{id}/revert`): the remediation's own
revert, then the action reverted and audited with the admin as actor (no threshold change: an
admin may revert for reasons of their own).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ragloop.config.pipeline import PipelineConfig
from ragloop.config.settings import Settings
from ragloop.improve import recalibration
from ragloop.improve.auditor import Auditor, AuditResult
from ragloop.improve.claims import claim_audit
from ragloop.improve.clock import SYSTEM_CLOCK, Clock
from ragloop.improve.label_proposals import propose_from_labels
from ragloop.improve.remediation import (
    REMEDIATIONS,
    ActionSpec,
    AppliedChange,
    ExpansionBackend,
    RemediationContext,
    RemediationSettings,
    make_expansion_backend,
    make_remediation,
)
from ragloop.improve.remediation.expansion_cache import REDIS_URL_ENV
from ragloop.improve.scheduler import Outcome, Policy, Scheduler, ScheduleResult, summarize
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.variants import IndexVariant, index_for
from ragloop.store import ImprovementAction, ImprovementActions, NotFoundError, Store, StoreConflictError


@dataclass(frozen=True)
class PassReport:
    started_at: str
    audited: list[AuditResult]
    scheduled: list[ScheduleResult]

    @property
    def applied(self) -> list[ScheduleResult]:
        return [r for r in self.scheduled if r.outcome is Outcome.APPLIED]

    def to_json(self) -> dict[str, Any]:
        verdicts: dict[str, int] = {}
        for a in self.audited:
            verdicts[a.verdict.value] = verdicts.get(a.verdict.value, 0) + 1
        return {
            "started_at": self.started_at,
            "scheduled": summarize(self.scheduled),
            "audited": verdicts,
            "actions": [r.to_json() for r in self.scheduled],
            "audits": [a.to_json() for a in self.audited],
        }


@dataclass
class CollectionResolver:
    """Collections by name, opened once per pass, each with its expansion backend (Redis when
    `redis_url`, else the collection's registry). With `config`, a name resolves to the index that
    config serves from (`index_for`: the collection, or its variant for another chunking), so a
    remediation changes what serves."""

    settings: Settings
    redis_url: str | None = None
    config: PipelineConfig | None = None
    _open: dict[str, Collection] = field(default_factory=dict)
    _backends: dict[str, ExpansionBackend] = field(default_factory=dict)

    def collection(self, name: str) -> Collection:
        if name not in self._open:
            coll = Collection(name, self.settings)
            self._open[name] = coll if self.config is None else index_for(coll, self.config)
        return self._open[name]

    def backend(self, name: str) -> ExpansionBackend:
        if name not in self._backends:
            coll = self.collection(name)
            primary = coll.primary if isinstance(coll, IndexVariant) else coll  # where serving reads them
            self._backends[name] = make_expansion_backend(primary.registry, name, self.redis_url)
        return self._backends[name]

    def close(self) -> None:
        for c in self._open.values():
            c.close()
        self._open.clear()
        self._backends.clear()


def make_context(
    store: Store,
    config: PipelineConfig,
    *,
    settings: Settings | None = None,
    clock: Clock = SYSTEM_CLOCK,
    redis_url: str | None = None,
    remediation: RemediationSettings | None = None,
    collections: Callable[[str], Collection] | None = None,
) -> tuple[RemediationContext, CollectionResolver]:
    resolver = CollectionResolver(
        settings or Settings(), redis_url if redis_url is not None else os.environ.get(REDIS_URL_ENV), config
    )
    ctx = RemediationContext(
        store=store,
        config=config,
        collections=collections or resolver.collection,
        expansion_backend=resolver.backend,
        clock=clock,
        settings=remediation or RemediationSettings(),
    )
    return ctx, resolver


def run_pass(
    store: Store,
    config: PipelineConfig,
    *,
    clock: Clock = SYSTEM_CLOCK,
    policy: Policy | None = None,
    settings: Settings | None = None,
    redis_url: str | None = None,
    remediation: RemediationSettings | None = None,
    worker: str | None = None,
    context: RemediationContext | None = None,
    label_collection: str | None = None,
) -> PassReport:
    """Audit due actions, then apply proposed ones (see `scheduler` and `auditor` for the rules).
    `config`: the pipeline that serves now (the collections were indexed with it); `label_collection`:
    also propose that collection's τL refit from labelled traffic (`label_proposals`)."""
    policy = policy or Policy()
    worker = worker or f"improve-{os.getpid()}-{secrets.token_hex(3)}"  # claims are per worker: unique
    resolver = None
    if context is None:
        context, resolver = make_context(
            store, config, settings=settings, clock=clock, redis_url=redis_url, remediation=remediation
        )
    try:
        started = context.clock.now().isoformat()
        audited = Auditor(context, policy, worker=f"{worker}:auditor").run()
        if label_collection is not None:  # the τL refit from labelled traffic, diagnosed or not
            propose_from_labels(store, config, label_collection, answer_check=context.settings.answer_check)
        recalibration.watch(context.store, context.clock, resamples=context.settings.resamples)
        scheduled = Scheduler(context, policy, worker=f"{worker}:scheduler").run()
        return PassReport(started_at=started, audited=audited, scheduled=scheduled)
    finally:
        if resolver is not None:
            resolver.close()


def current_config(store: Store) -> PipelineConfig:
    """The active pipeline version's config (the defaults before any activation)."""
    current = store.pipelines.current()
    return PipelineConfig.model_validate(current.config) if current is not None else PipelineConfig()


def revert_action(
    store: Store,
    action_id: str,
    *,
    actor: str = "admin",
    settings: Settings | None = None,
    config: PipelineConfig | None = None,
    clock: Clock = SYSTEM_CLOCK,
    redis_url: str | None = None,
) -> ImprovementAction:
    """Undo an applied (or kept) action. NotFoundError: no such action; StoreConflictError: not
    applied, no remediation reverts its kind, or an auditor holds it right now."""
    actions = ImprovementActions(store.db, clock=clock)
    row = actions.get(action_id)
    if row is None:
        raise NotFoundError(f"no improvement action {action_id!r}")
    if row.status not in ("applied", "kept"):
        raise StoreConflictError(f"action {action_id} is {row.status}: only applied or kept actions are reverted")
    spec = ActionSpec.from_row(row)
    if spec.kind not in REMEDIATIONS:
        raise StoreConflictError(f"no remediation reverts {spec.kind.value!r} actions")
    change = AppliedChange.model_validate(row.revert_payload or {"kind": spec.kind, "effect": "record", "summary": ""})
    due = row.audit_due_at
    if row.status == "applied" and due is not None and not claim_audit(store, action_id, due, clock.now(), 600.0):
        raise StoreConflictError(f"action {action_id} is being audited; try again")
    ctx, resolver = make_context(
        store, config or current_config(store), settings=settings, clock=clock, redis_url=redis_url
    )
    try:
        make_remediation(spec).revert(ctx, change)
    finally:
        resolver.close()
    with store.db.transaction():
        reverted = actions.mark_reverted(action_id, reason=f"reverted by {actor}")
        store.audit.record(
            "remediation_revert",
            triggered_by=f"revert:{action_id}",
            actor=actor,
            evidence={"action_id": action_id, "kind": row.kind, "domain": row.domain, "undone": change.revert},
            refers_to=spec.payload.get("applied_log_id"),
        )
    return reverted
