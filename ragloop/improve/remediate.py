"""One remediation pass: audit what is due, then schedule and apply what is proposed.

`run_pass` is what `ragloop improve run` and the service worker call after diagnosis. Auditing
comes first so that a component whose change was just judged is free again and a raised evidence
threshold already applies to this pass's proposals.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ragloop.config.pipeline import PipelineConfig
from ragloop.config.settings import Settings
from ragloop.improve.auditor import Auditor, AuditResult
from ragloop.improve.clock import SYSTEM_CLOCK, Clock
from ragloop.improve.remediation import (
    ExpansionBackend,
    RemediationContext,
    RemediationSettings,
    make_expansion_backend,
)
from ragloop.improve.scheduler import Outcome, Policy, Scheduler, ScheduleResult, summarize
from ragloop.retrieval.collection import Collection
from ragloop.store import Store

REDIS_URL_ENV = "RAGLOOP_REDIS_URL"


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
    `redis_url`, else the collection's registry)."""

    settings: Settings
    redis_url: str | None = None
    _open: dict[str, Collection] = field(default_factory=dict)
    _backends: dict[str, ExpansionBackend] = field(default_factory=dict)

    def collection(self, name: str) -> Collection:
        if name not in self._open:
            self._open[name] = Collection(name, self.settings)
        return self._open[name]

    def backend(self, name: str) -> ExpansionBackend:
        if name not in self._backends:
            self._backends[name] = make_expansion_backend(self.collection(name).registry, name, self.redis_url)
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
        settings or Settings(), redis_url if redis_url is not None else os.environ.get(REDIS_URL_ENV)
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
) -> PassReport:
    """Audit due actions, then apply proposed ones (see `scheduler` and `auditor` for the rules).
    `config`: the pipeline that serves now (the collections were indexed with it)."""
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
        scheduled = Scheduler(context, policy, worker=f"{worker}:scheduler").run()
        return PassReport(started_at=started, audited=audited, scheduled=scheduled)
    finally:
        if resolver is not None:
            resolver.close()
