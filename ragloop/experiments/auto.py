"""The auto-experiment step: a machine-made candidate reaches production only through the promotion
path, and gets onto it without anyone starting it by hand.

Remediations (`ragloop.improve.remediation`: the τL refit, the fusion / top-k / retrieval-mode refit,
prompt variants) register *candidate* pipeline versions whose `created_by` starts with
`remediation:` and whose parent is the version that served the traffic they learnt from. Each call
of `auto_experiment_step` (a periodic task of `ragloop serve`, beside the aggregation that decides
experiments) does at most one of:

1. **busy**: an experiment is running (one at a time, enforced by the database): nothing to do;
   the aggregation promotes it or halts it on a guardrail. Unless it is decided against: when the
   aggregation recommends `keep_control` (enough samples, and the confidence sequence excludes a
   gain of min_effect) the step **rejects** it, and one still undecided after `max_duration_s` is
   **stopped** as inconclusive, so a candidate that does not win never blocks the next one.
2. For the oldest untried candidate:
   - built on a version that no longer serves → **rebased**: its changes (the leaves where it
     differs from its parent) applied to the current version, registered as a new candidate with
     the same creator; the stale one is refused (audited) and the new one waits for the next step;
   - **awaiting approval** when `require_approval` is on and no human approved it
     (`store.pipelines.approve`); off by default, see below;
   - **golden check** on the working golden set (never the held-out 20%): candidate and current
     answer the same entries, and the candidate is refused when any gate metric (end-to-end
     correctness, document recall, refusals: `regression.GATES`; answer F1 is reported, not a gate)
     regresses by the nightly regression's own rule (`regression.compare_paired`: a relative drop
     > 2% *and* a paired 95% interval below 0), or when correct refusal of the unanswerable entries
     is likely worse (`regression.HARM_GUARDED`: the one-sided 90% upper bound below 0).
     Refused → audited (`auto_experiment_refused`), never tried again;
   - passed, and the candidate's gain was already measured (`off_policy`, on by default: a τL raise
     or a retrieval refit on labelled traffic, an answer-graph variant by its golden trial) →
     **promoted** directly in the maintenance window (`via=remediation`, audited with that evidence
     and the golden check's): the question an experiment would ask is already answered, see
     `ragloop.experiments.off_policy`;
   - passed → an **experiment** with the service's defaults (`AutoExperimentSettings`: traffic split,
     minimum sample, minimum duration on the loop's clock, primary metric, guardrails), audited
     (`auto_experiment_start`) with the golden evidence. The existing aggregation decides it.

A candidate is *tried* once it has an experiment (any status) or a refusal entry; it is never
started twice. Two workers racing on one candidate: both may run the golden check, only one
experiment is created (the partial unique index on running experiments), the other reports a
conflict.

**Human approval** is off by default for machine-made candidates: the golden check guards against a
broken or worse config before any user sees it, the experiment exposes only `traffic_split` of
sessions with guardrails that halt it at once, and promotion needs an always-valid significant
gain; an approval would add latency (days, on a real team) without adding evidence. Operators who
want a person in the loop set `RAGLOOP_AUTO_EXPERIMENT_REQUIRES_APPROVAL=true`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from ragloop.config import PipelineConfig
from ragloop.experiments.activation_audit import golden_expectation
from ragloop.experiments.assignment import ExperimentStatus
from ragloop.experiments.golden import working_set
from ragloop.experiments.metrics import Metric, parse_metric
from ragloop.experiments.off_policy import off_policy_evidence
from ragloop.experiments.promotion import MaintenanceWindow
from ragloop.experiments.registry import (
    Clock,
    ExperimentConflictError,
    ExperimentError,
    ExperimentSpec,
    create_experiment,
    end_experiment,
    running_experiment,
    utc_now,
)
from ragloop.experiments.regression import (
    GATES,
    HARM_ALPHA,
    HARM_GUARDED,
    THRESHOLD,
    Answerer,
    MetricComparison,
    compare_paired,
    score_entry,
)
from ragloop.experiments.versions import PromotedVia, version_config

if TYPE_CHECKING:
    from ragloop.store import Experiment, PipelineVersion, Store

SOURCE_PREFIX = "remediation:"
"""`created_by` of a machine-made candidate starts with this (then the remediation kind)."""
ACTOR = "auto-experiment"
REFUSED = "auto_experiment_refused"
STARTED = "auto_experiment_start"


class AutoOutcome(StrEnum):
    STARTED = "started"
    BUSY = "busy"
    IDLE = "idle"
    REBASED = "rebased"
    REFUSED = "refused"
    AWAITING_APPROVAL = "awaiting_approval"
    CONFLICT = "conflict"
    ENDED = "ended"
    PROMOTED = "promoted"
    AWAITING_WINDOW = "awaiting_window"


@dataclass(frozen=True)
class AutoExperimentSettings:
    """The experiment every machine-made candidate gets (the service's `RAGLOOP_EXPERIMENT_*`)."""

    traffic_split: float = 0.05
    min_sample_size: int = 500
    min_duration_s: float = 86400.0
    primary_metric: str = Metric.TIER1_SCORE.value
    min_effect: float = 0.02
    guardrail_metrics: tuple[str, ...] = (Metric.FAITHFULNESS.value, Metric.LATENCY_P99.value)
    max_duration_s: float = 7 * 86400.0
    """A live experiment undecided after this long is stopped (inconclusive) to free the slot; 0: never."""
    require_approval: bool = False
    off_policy: bool = True
    """A candidate whose gain was already measured (τL raise, retrieval refit, answer-graph trial) goes
    current on the golden check (`ragloop.experiments.off_policy`)."""
    golden_threshold: float = THRESHOLD
    golden_limit: int = 200
    """At most this many working-set entries per golden check (each is answered twice)."""

    def spec(self, name: str, control: str, treatment: str) -> ExperimentSpec:
        return ExperimentSpec(
            name=name,
            control=control,
            treatment=treatment,
            traffic_split=self.traffic_split,
            min_sample_size=self.min_sample_size,
            min_duration=self.min_duration_s,
            primary_metric=parse_metric(self.primary_metric),
            min_effect=self.min_effect,
            guardrail_metrics=[parse_metric(m) for m in self.guardrail_metrics],
        )


@dataclass(frozen=True)
class GoldenVerdict:
    passed: bool
    detail: dict[str, Any]


GoldenCheck = Callable[[str, str], GoldenVerdict]
"""(current version, candidate version) -> may the candidate face live traffic."""


@dataclass(frozen=True)
class AutoStep:
    outcome: AutoOutcome
    candidate: str | None = None
    experiment_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "candidate": self.candidate,
            "experiment_id": self.experiment_id,
            "detail": self.detail,
        }


def golden_check(
    store: Store, answerer_for: Callable[[str], Answerer], *, threshold: float = THRESHOLD, limit: int = 200
) -> GoldenCheck:
    """The paired check on the working golden set; `answerer_for(version_id)` answers as that version."""

    def check(current: str, candidate: str) -> GoldenVerdict:
        entries = working_set(store)[:limit]
        if not entries:
            return GoldenVerdict(True, {"entries": 0, "note": "empty working golden set: nothing to check"})
        try:
            scored: dict[str, dict[str, dict[str, float]]] = {current: {}, candidate: {}}
            for version in (current, candidate):
                answer = answerer_for(version)
                for e in entries:
                    for metric, value in score_entry(e, answer(e.question)).items():
                        scored[version].setdefault(metric, {})[e.lineage_id] = value
        except Exception as exc:  # a candidate that cannot answer is refused, with the reason
            return GoldenVerdict(False, {"entries": len(entries), "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        comparisons = [
            c
            for m in GATES
            if (c := compare_paired(m, scored[current].get(m, {}), scored[candidate].get(m, {}), threshold)) is not None
        ]
        return golden_verdict(len(entries), comparisons, threshold)

    return check


def golden_verdict(
    entries: int, comparisons: Sequence[MetricComparison], threshold: float = THRESHOLD
) -> GoldenVerdict:
    """The check's decision with the rule it applied, as the audit log keeps it (the admin timeline
    draws it as a table, its caption from `rule`, so a changed threshold shows where it was used)."""
    regressed = [c.metric for c in comparisons if c.regressed]
    harmed = [c.metric for c in comparisons if c.metric in HARM_GUARDED and c.likely_worse()]
    return GoldenVerdict(
        not regressed and not harmed,
        {
            "entries": entries,
            "regressed": regressed,
            "likely_worse": harmed,
            "metrics": [c.to_json() for c in comparisons],
            "rule": {"threshold": threshold, "harm_guarded": list(HARM_GUARDED), "harm_alpha": HARM_ALPHA},
        },
    )


def tried(store: Store, version_id: str) -> bool:
    """The candidate has had its chance: an experiment (any status) or a refusal entry."""
    from ragloop.store.models import Experiment, ImprovementAuditLog

    with store.db.transaction(write=False) as s:
        if s.scalar(select(Experiment.experiment_id).where(Experiment.treatment_version == version_id).limit(1)):
            return True
        refused = select(ImprovementAuditLog.log_id).where(
            ImprovementAuditLog.action_type == REFUSED, ImprovementAuditLog.pipeline_version_after == version_id
        )
        return s.scalar(refused.limit(1)) is not None


def pending_candidates(store: Store) -> list[PipelineVersion]:
    """Machine-made candidates never tried, oldest first."""
    return [
        v
        for v in store.pipelines.list_versions(status="candidate")
        if (v.created_by or "").startswith(SOURCE_PREFIX) and not tried(store, v.version_id)
    ]


def _leaves(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for k, v in data.items():
        if isinstance(v, Mapping):
            out.update(_leaves(v, (*prefix, str(k))))
        else:
            out[(*prefix, str(k))] = v
    return out


def changes(parent: PipelineConfig, candidate: PipelineConfig) -> dict[str, Any]:
    """The candidate's changes as nested overrides (leaves that differ; the name is a label)."""
    a = _leaves(parent.model_dump(mode="json", by_alias=True, exclude={"name"}))
    b = _leaves(candidate.model_dump(mode="json", by_alias=True, exclude={"name"}))
    out: dict[str, Any] = {}
    for path, value in b.items():
        if a.get(path, object()) != value:
            node = out
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value
    return out


def _refuse(store: Store, current: str, cand: PipelineVersion, reason: str, evidence: Mapping[str, Any]) -> None:
    store.audit.record(
        REFUSED,
        triggered_by=reason[:200],
        actor=ACTOR,
        evidence={"candidate": cand.version_id, "created_by": cand.created_by, **evidence},
        pipeline_version_before=current,
        pipeline_version_after=cand.version_id,
    )


def _rebase(store: Store, current: PipelineVersion, cand: PipelineVersion) -> AutoStep:
    base = PipelineConfig.model_validate(current.config)
    parent = cand.parent_version_id
    diff: dict[str, Any] = {}
    if parent is not None and store.pipelines.get(parent) is not None:
        diff = changes(version_config(store, parent), PipelineConfig.model_validate(cand.config))
    rebased = base.with_overrides(**diff).model_copy(update={"name": f"{base.name}+rebased"}) if diff else base
    detail: dict[str, Any] = {"from_parent": cand.parent_version_id, "changes": diff}
    if rebased.version_id == current.version_id:
        _refuse(store, current.version_id, cand, "stale candidate: its changes are already served", detail)
        return AutoStep(AutoOutcome.REFUSED, cand.version_id, detail=detail | {"reason": "nothing left to change"})
    row = store.pipelines.register_config(
        rebased,
        description=f"{cand.description or cand.version_id} (rebased onto {current.version_id})",
        parent_version_id=current.version_id,
        created_by=cand.created_by,
    )
    reason = f"stale candidate: rebased onto the current version as {row.version_id}"
    _refuse(store, current.version_id, cand, reason, detail)
    return AutoStep(AutoOutcome.REBASED, cand.version_id, detail=detail | {"rebased_as": row.version_id})


def _end_if_decided(
    store: Store, live: Experiment, settings: AutoExperimentSettings, clock: Clock, actor: str
) -> AutoStep | None:
    """End a live experiment the aggregation has decided against (`keep_control`: enough samples and
    the confidence sequence excludes a gain of min_effect) or that outlived `max_duration_s` without a
    decision, so the next candidate gets the slot. Audited by `end_experiment`."""
    from ragloop.experiments.aggregation import Recommendation

    started = live.started_at or live.created_at
    age = (clock() - (started if started.tzinfo else started.replace(tzinfo=UTC))).total_seconds()
    if live.recommendation == Recommendation.KEEP_CONTROL:
        to, reason = ExperimentStatus.REJECTED, "keep control: the treatment's gain is excluded at min_effect"
    elif settings.max_duration_s and age > settings.max_duration_s:
        to, reason = ExperimentStatus.STOPPED, f"inconclusive after {age:.0f} s (max {settings.max_duration_s:.0f} s)"
    else:
        return None
    try:
        end_experiment(store, live.experiment_id, to, actor=actor, reason=reason, clock=clock)
    except ExperimentConflictError:  # another worker ended (or the aggregation promoted) it first
        return AutoStep(AutoOutcome.BUSY, live.treatment_version, live.experiment_id)
    detail = {"status": to.value, "reason": reason}
    return AutoStep(AutoOutcome.ENDED, live.treatment_version, live.experiment_id, detail)


def _shut(window: MaintenanceWindow | None, clock: Clock, cand: PipelineVersion) -> AutoStep | None:
    """An off-policy promotion waits for the maintenance window."""
    if window is None or window.is_open(clock()):
        return None
    return AutoStep(AutoOutcome.AWAITING_WINDOW, cand.version_id, detail={"window": str(window)})


def _off_policy(store: Store, current: PipelineVersion, cand: PipelineVersion) -> dict[str, Any] | None:
    diff = changes(PipelineConfig.model_validate(current.config), PipelineConfig.model_validate(cand.config))
    return off_policy_evidence(store, current, cand, diff)


_MEASURED = {
    "tau_raise": "off-policy gain on labelled traffic",
    "retrieval_refit": "cross-fitted retrieval gain on diagnosed traffic",
    "answer_trial": "golden-trial correctness gain",
    "answer_check": "off-policy gain of the answer check on labelled traffic",
    "chunking_fit": "chunk size's gain on pooled chunking failures",
}


def _promote_off_policy(
    store: Store,
    current: PipelineVersion,
    cand: PipelineVersion,
    off: dict[str, Any],
    verdict: GoldenVerdict,
    actor: str,
) -> AutoStep:
    from ragloop.store import StoreConflictError

    evidence = {"off_policy": off, "golden": verdict.detail, "candidate": cand.version_id}
    try:
        store.pipelines.activate(
            cand.version_id,
            actor=actor,
            reason=f"{_MEASURED.get(str(off.get('route')), 'measured gain')} and golden check passed: "
            f"{cand.description or ''}"[:200],
            evidence=evidence,
            via=PromotedVia.REMEDIATION.value,
            expected_current=current.version_id,
            expected_delta=golden_expectation(verdict.detail),
        )
    except StoreConflictError as exc:  # another worker promoted something first
        return AutoStep(AutoOutcome.CONFLICT, cand.version_id, detail={"reason": str(exc)})
    return AutoStep(AutoOutcome.PROMOTED, cand.version_id, detail=evidence)


def auto_experiment_step(
    store: Store,
    golden: GoldenCheck,
    *,
    settings: AutoExperimentSettings | None = None,
    clock: Clock = utc_now,
    actor: str = ACTOR,
    window: MaintenanceWindow | None = None,
) -> AutoStep:
    """Move the oldest untried machine-made candidate one step along (see the module docstring).
    `window`: when an off-policy candidate may be promoted (None: any time)."""
    settings = settings or AutoExperimentSettings()
    live = running_experiment(store)
    if live is not None:
        ended = _end_if_decided(store, live, settings, clock, actor)
        if ended is None:
            return AutoStep(AutoOutcome.BUSY, live.treatment_version, live.experiment_id)
        return ended
    current = store.pipelines.current()
    if current is None:
        return AutoStep(AutoOutcome.IDLE, detail={"reason": "no current version"})
    waiting: list[str] = []
    for cand in pending_candidates(store):
        if cand.parent_version_id is not None and cand.parent_version_id != current.version_id:
            return _rebase(store, current, cand)
        if settings.require_approval and not cand.approvals:
            waiting.append(cand.version_id)
            continue
        off = _off_policy(store, current, cand) if settings.off_policy else None
        if off is not None and (shut := _shut(window, clock, cand)) is not None:
            return shut
        verdict = golden(current.version_id, cand.version_id)
        if not verdict.passed:
            _refuse(store, current.version_id, cand, "golden-set check failed", {"golden": verdict.detail})
            return AutoStep(AutoOutcome.REFUSED, cand.version_id, detail={"golden": verdict.detail})
        if off is None and settings.off_policy:
            # a remediation registers its candidate before the scheduler commits the entry with its
            # measurement; a check that began in between must not send a measured candidate to an
            # experiment it cannot win
            off = _off_policy(store, current, cand)
        if off is not None:
            return _shut(window, clock, cand) or _promote_off_policy(store, current, cand, off, verdict, actor)
        spec = settings.spec(f"auto: {cand.created_by} {cand.version_id}", current.version_id, cand.version_id)
        try:
            exp = create_experiment(store, spec, actor=actor, clock=clock)
        except ExperimentConflictError as exc:
            return AutoStep(AutoOutcome.CONFLICT, cand.version_id, detail={"reason": str(exc)})
        except ExperimentError as exc:  # e.g. control = treatment: nothing to test
            _refuse(store, current.version_id, cand, f"no experiment possible: {exc}", {})
            return AutoStep(AutoOutcome.REFUSED, cand.version_id, detail={"reason": str(exc)})
        store.audit.record(
            STARTED,
            triggered_by=f"candidate {cand.version_id} by {cand.created_by}",
            actor=actor,
            evidence={
                "experiment_id": exp.experiment_id,
                "candidate": cand.version_id,
                "description": cand.description,
                "golden": verdict.detail,
                "settings": spec.model_dump(mode="json"),
            },
            pipeline_version_before=current.version_id,
            pipeline_version_after=cand.version_id,
        )
        return AutoStep(AutoOutcome.STARTED, cand.version_id, exp.experiment_id, {"golden": verdict.detail})
    if waiting:
        return AutoStep(AutoOutcome.AWAITING_APPROVAL, waiting[0], detail={"waiting": waiting})
    return AutoStep(AutoOutcome.IDLE)
