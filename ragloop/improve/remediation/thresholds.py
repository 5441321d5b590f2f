"""Threshold recalibration (refusal errors): refit one collection's gate τL from its own labelled
traffic, as a candidate pipeline version.

A sample is the gate's top grade score for an answer and whether answering it / refusing it is
right (from labels: by default every label the collection's traffic carries — ratings, corrections,
reviewer labels, diagnoses — `gate_samples` and `gate_labels`; or given in the payload). The gate refuses below τL, so
τL trades false refusals (answerable, refused) against false answers (unanswerable, answered). The
fit maximises accuracy subject to the false-refusal rate's Wilson upper bound <= `max_false_refusal`
(5%), and a candidate is registered only when the paired bootstrap interval of the accuracy gain
over the serving τL is above zero. τU only separates CORRECT from AMBIGUOUS and moves with τL only
where τL would pass it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ragloop.evaluation.stats import paired_bootstrap
from ragloop.improve.payload import StoredTrace
from ragloop.improve.remediation.base import (
    AppliedChange,
    AuditNote,
    Effect,
    Remediation,
    RemediationContext,
    register_candidate,
)
from ragloop.improve.remediation.gate_labels import impute, labelled_answers
from ragloop.improve.types import ActionKind
from ragloop.store import Store

GRID = tuple(round(0.01 * i, 2) for i in range(101))


class GateSample(BaseModel):
    """One answer's gate score and whether answering / refusing it is right. `answerable` alone says
    both (answering right, refusing wrong, or the reverse); `answer_right` / `refusal_right`, when
    given, say each separately and may be fractions (labels combined by weight, or imputed:
    `gate_labels`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    score: float = Field(ge=0.0, le=1.0)
    answerable: bool = True
    label_source: str = ""
    answer_right: float | None = Field(default=None, ge=0.0, le=1.0)
    refusal_right: float | None = Field(default=None, ge=0.0, le=1.0)

    @property
    def rights(self) -> tuple[float, float]:
        """(answering right, refusing right)."""
        a = self.answer_right if self.answer_right is not None else float(self.answerable)
        r = self.refusal_right if self.refusal_right is not None else float(not self.answerable)
        return a, r


def wilson_upper(k: int, n: int, z: float = 1.959963984540054) -> float:
    if n == 0:
        return 1.0
    p = k / n
    centre = p + z * z / (2 * n)
    radius = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + radius) / (1 + z * z / n))


@dataclass(frozen=True)
class TauFit:
    current: float
    fitted: float
    accuracy_before: float
    accuracy_after: float
    gain: float
    lo: float
    hi: float
    false_refusal_after: float
    false_refusal_upper: float
    n: int

    @property
    def improves(self) -> bool:
        return self.n > 1 and self.lo > 0.0 and self.fitted != self.current

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _outcomes(scores: np.ndarray, rights: np.ndarray, tau: float) -> tuple[np.ndarray, float]:
    """Per sample: is the outcome at `tau` right (expected value for fractional labels); and the
    expected number of answerable questions refused."""
    refused = scores < tau
    correct = np.where(refused, rights[:, 1], rights[:, 0])
    return correct, float(((1.0 - rights[:, 1]) * refused).sum())


def fit_tau_lower(
    samples: Sequence[GateSample],
    current: float,
    *,
    max_false_refusal: float = 0.05,
    resamples: int = 1000,
    seed: int = 20240601,
) -> TauFit:
    scores = np.array([s.score for s in samples], dtype=np.float64)
    rights = np.array([s.rights for s in samples], dtype=np.float64).reshape(-1, 2)
    n_ans = round(float((1.0 - rights[:, 1]).sum()))
    base_correct, _ = _outcomes(scores, rights, current)
    best: tuple[float, float, float] | None = None  # (accuracy, -distance from current, tau)
    for tau in GRID:
        correct, fr = _outcomes(scores, rights, tau)
        if wilson_upper(round(fr), n_ans) > max_false_refusal:
            continue
        key = (float(correct.mean()) if len(correct) else 0.0, -abs(tau - current), tau)
        best = key if best is None or key > best else best
    fitted = current if best is None else best[2]
    correct, fr = _outcomes(scores, rights, fitted)
    gain, lo, hi = (
        paired_bootstrap(base_correct.tolist(), correct.tolist(), resamples=resamples, seed=seed)
        if len(scores)
        else (0.0, 0.0, 0.0)
    )
    return TauFit(
        current=current,
        fitted=fitted,
        accuracy_before=float(base_correct.mean()) if len(scores) else 0.0,
        accuracy_after=float(correct.mean()) if len(scores) else 0.0,
        gain=gain,
        lo=lo,
        hi=hi,
        false_refusal_after=fr / n_ans if n_ans else 0.0,
        false_refusal_upper=wilson_upper(round(fr), n_ans),
        n=len(samples),
    )


def first_gate_score(trace: Mapping[str, Any] | None) -> float | None:
    """The best grade of the first `grade` record of a stored answer's trace: what τL was compared to."""
    return StoredTrace.load(trace).first_gate_score()


def gate_samples(store: Store, collection: str, *, limit: int = 5000) -> list[GateSample]:
    """Labelled gate scores of the collection's traffic: user ratings, corrections, reviewer labels
    and diagnoses, combined per answer and imputed where a label leaves a fact open (`gate_labels`).
    Labelled answers are not a random sample (users rate more often what went wrong): the fit is a
    candidate for the golden check and an experiment to judge, never a change that serves."""
    labelled = labelled_answers(store, collection, first_gate_score, limit=limit)
    return [
        GateSample(
            score=item.score,
            answerable=rights[1] < 0.5,
            answer_right=rights[0],
            refusal_right=rights[1],
            label_source="+".join(item.sources),
        )
        for item, rights in zip(labelled, impute(labelled), strict=True)
    ]


class ThresholdPayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    collection: str
    samples: tuple[GateSample, ...] = ()
    """Labelled gate scores of this collection's traffic (who labelled each: `label_source`)."""
    max_false_refusal: float = Field(default=0.05, gt=0.0, lt=1.0)
    min_samples: int = Field(default=50, ge=2)


class ThresholdRecalibrationAction(Remediation[ThresholdPayload]):
    kind: ClassVar[ActionKind] = ActionKind.THRESHOLD_RECALIBRATION
    effect: ClassVar[Effect] = Effect.CANDIDATE
    cost: ClassVar[float] = 2.0
    payload_type: ClassVar[type[BaseModel]] = ThresholdPayload

    def samples(self, ctx: RemediationContext) -> tuple[GateSample, ...]:
        return self.payload.samples or tuple(gate_samples(ctx.store, self.payload.collection))

    def ready(self, ctx: RemediationContext) -> str | None:
        n, need = len(self.samples(ctx)), self.payload.min_samples
        return None if n >= need else f"{n}/{need} labelled gate samples"

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        p = self.payload
        agent = ctx.config.agent
        samples = self.samples(ctx)
        fit = fit_tau_lower(
            samples,
            agent.tau_lower,
            max_false_refusal=p.max_false_refusal,
            resamples=ctx.settings.resamples,
            seed=ctx.settings.seed,
        )
        candidate = None
        if fit.improves:
            cfg = ctx.config.with_overrides(
                agent={"tau_lower": fit.fitted, "tau_upper": max(agent.tau_upper, fit.fitted)}
            )
            cfg = cfg.model_copy(update={"name": f"{ctx.config.name}+tau-{p.collection}"})
            sources = sorted({s.label_source for s in samples if s.label_source})
            labels = ", ".join(sources) or "labels"
            candidate = register_candidate(
                ctx, cfg, self.kind, f"tau_lower refit for {p.collection} on {fit.n} labelled answers ({labels})"
            )
        note = AuditNote(
            action_type="threshold_refit",
            evidence={"domain": p.collection, "fit": fit.to_json(), "candidate_version": candidate},
            pipeline_version_before=ctx.config.version_id,
            pipeline_version_after=candidate,
        )
        verdict = f"candidate {candidate}" if candidate else "no candidate (accuracy gain interval includes 0)"
        return AppliedChange(
            kind=self.kind,
            effect=Effect.CANDIDATE if candidate else Effect.RECORD,
            summary=f"tau_lower {fit.current} -> {fit.fitted} on {fit.n} answers: {verdict}",
            candidate_version=candidate,
            notes=(note,),
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        return None
