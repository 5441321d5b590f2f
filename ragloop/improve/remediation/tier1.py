"""Tier-1 recalibration: refit the tier-1 linear model on its labels and replace the serving one
only when the refit agrees with the labels on held-out answers (`ragloop.improve.recalibration`
has the labels, the agreement and the model versions).

Proposed by the weekly check (agreement below 0.80) or by the label buffer (200 new labels since
the last refit); waits until `min_labels` labels exist. The fit: weighted least squares on the
labels of the answers outside a stable 20% (`recalibration.held_out`), at most `max_labels`, newest
first. The held-out labels decide: the new model replaces the serving one when its held-out 3-way
agreement is >= 0.87 *and* the paired bootstrap interval of its agreement gain over the serving
model on the same labels lies above 0 (a refit that is not measurably better is no reason to
move). Replacing is one `tier1_model` audit entry, written with the action's own entry in the
scheduler's transaction, so a refit is active exactly when it is recorded; the previous model
stays in the log and `revert` re-activates it. Either way the decision, the labels used (per
source), both models' agreement with its interval and the low-score routing share before and after
are a `tier1_refit` entry.

Effect RECORD: tier 1 changes no answer; the held-out check is its measurement, so the auditor has
nothing to measure after a window.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ragloop.improve import recalibration as rc
from ragloop.improve.remediation.base import AppliedChange, AuditNote, Effect, Remediation, RemediationContext
from ragloop.improve.tier1 import HeuristicModel
from ragloop.improve.types import ActionKind

ROUTING_THRESHOLD = 0.6
"""`RoutingConfig.tier2_threshold`'s default: the routing share reported with each refit."""


class Tier1Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    min_labels: int = Field(default=rc.BUFFER_SIZE, ge=10)
    max_labels: int = Field(default=5000, ge=10)
    replace_at: float = Field(default=rc.REPLACE_AT, ge=0.0, le=1.0)


def refit(
    labels: list[rc.Label],
    serving: HeuristicModel,
    *,
    replace_at: float = rc.REPLACE_AT,
    resamples: int = 1000,
    seed: int = 20240601,
    name: str = "fitted",
) -> tuple[HeuristicModel | None, dict[str, Any]]:
    """(the model to activate or None, the decision's evidence)."""
    train = [lb for lb in labels if not rc.held_out(lb.answer_id)]
    test = [lb for lb in labels if rc.held_out(lb.answer_id)]
    model = HeuristicModel.fit(
        [lb.features for lb in train], [lb.target for lb in train], name, [lb.weight for lb in train]
    )
    new = rc.agreement(model, test, resamples=resamples, seed=seed)
    old = rc.agreement(serving, test, resamples=resamples, seed=seed)
    gain, lo, hi = rc.agreement_gain(serving, model, test, resamples=resamples, seed=seed)
    replace = len(test) > 1 and new.value >= replace_at and lo > 0.0
    rows = [lb.features for lb in test]
    newest = max((lb.at for lb in labels), default=None)
    evidence: dict[str, Any] = {
        "decision": "replaced" if replace else "kept",
        "why": (
            f"held-out agreement {new.value:.3f} >= {replace_at} and gain {gain:+.3f} [{lo:+.3f}, {hi:+.3f}] > 0"
            if replace
            else f"held-out agreement {new.value:.3f} (bar {replace_at}), gain {gain:+.3f} [{lo:+.3f}, {hi:+.3f}]"
        ),
        "replace_at": replace_at,
        "fitted": model.to_json(),
        "serving": serving.version,
        "train": {"labels": len(train), "sources": rc.sources_of(train)},
        "held_out": {"labels": len(test), "sources": rc.sources_of(test)},
        "agreement_fitted": new.to_json(),
        "agreement_serving": old.to_json(),
        "agreement_gain": {"value": round(gain, 6), "lo": round(lo, 6), "hi": round(hi, 6)},
        "routing_share_held_out": {
            "serving": round(rc.routing_share(serving, rows, ROUTING_THRESHOLD), 6),
            "fitted": round(rc.routing_share(model, rows, ROUTING_THRESHOLD), 6),
            "threshold": ROUTING_THRESHOLD,
        },
        "labels_until": newest.isoformat() if newest is not None else None,
    }
    return (model if replace else None), evidence


class Tier1RecalibrationAction(Remediation[Tier1Payload]):
    kind: ClassVar[ActionKind] = ActionKind.TIER1_RECALIBRATION
    effect: ClassVar[Effect] = Effect.RECORD
    cost: ClassVar[float] = 1.0
    payload_type: ClassVar[type[BaseModel]] = Tier1Payload

    def ready(self, ctx: RemediationContext) -> str | None:
        n, need = len(rc.collect_labels(ctx.store, limit=self.payload.min_labels)), self.payload.min_labels
        return None if n >= need else f"{n}/{need} tier-1 labels"

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        p = self.payload
        labels = rc.collect_labels(ctx.store, limit=p.max_labels)[: p.max_labels]
        serving = rc.active_model(ctx.store)
        model, evidence = refit(
            labels,
            serving,
            replace_at=p.replace_at,
            resamples=ctx.settings.resamples,
            seed=ctx.settings.seed,
            name=f"fit{ctx.clock.now():%Y%m%d}",
        )
        notes = [AuditNote(action_type=rc.REFIT_ENTRY, evidence=evidence)]
        if model is not None:
            why = {"agreement": evidence["agreement_fitted"], "labels": len(labels), "refit": evidence["why"]}
            notes.append(
                AuditNote(action_type=rc.MODEL_ENTRY, evidence=rc.model_entry(model, previous=serving, why=why))
            )
        summary = (
            f"tier-1 model {serving.version} -> {model.version}: {evidence['why']}"
            if model is not None
            else f"tier-1 model {serving.version} kept: {evidence['why']}"
        )
        return AppliedChange(
            kind=self.kind,
            effect=Effect.RECORD,
            summary=summary,
            revert={"previous": serving.to_json(), "activated": model.version if model else None},
            notes=tuple(notes),
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        """Re-activate the model this refit replaced (a new `tier1_model` entry; nothing is deleted)."""
        if not change.revert.get("activated"):
            return
        previous = HeuristicModel.from_json(change.revert["previous"])
        current = rc.active_model(ctx.store)
        ctx.store.audit.record(
            rc.MODEL_ENTRY,
            triggered_by=f"revert of {change.revert['activated']}",
            actor="improve",
            evidence=rc.model_entry(previous, previous=current, why={"reverted": change.revert["activated"]}),
        )
