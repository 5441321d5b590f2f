"""Threshold recalibration (refusal errors): refit one collection's gate τL from its own labelled
traffic, as a candidate pipeline version.

A sample is the gate's top grade score for an answer and whether answering it / refusing it is
right (from labels: by default every label the collection's traffic carries — ratings, corrections,
reviewer labels, diagnoses — `gate_samples` and `gate_labels`; or given in the payload). The gate refuses below τL, so
τL trades false refusals (answerable, refused) against false answers (unanswerable, answered). The
fit maximises accuracy subject to refusing at most `max_false_refusal` (5 points) more of the
answerable questions than the serving τL does, and a candidate is registered only when the gain
over the serving τL has its paired bootstrap interval above zero both in sample and **cross-fitted**
(`fit_tau_lower`: τL chosen on 4/5 of the labels, its gain taken on the other 1/5, every fold in turn),
because the best of a hundred thresholds, tested on the labels it was picked on, clears zero by
chance: a 0.30 -> 0.32 raise on 51 MTRAG-UN labels "gained" +6.9 points [+1.5, +14.3] in sample. A raise
rests on outcomes the labels give; a lowering on imputed ones (`TauFit.off_policy`). τU only
separates CORRECT from AMBIGUOUS and moves with τL only where τL would pass it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ragloop.improve.payload import StoredTrace
from ragloop.improve.remediation.base import (
    AppliedChange,
    AuditNote,
    Effect,
    Remediation,
    RemediationContext,
    register_candidate,
)
from ragloop.improve.remediation.gate_labels import Labelled, impute, labelled_answers
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
    refused: bool | None = None
    """Was the served answer a refusal (None: unknown, taken to be the gate's own decision)."""

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
    """Wilson upper bound of the absolute false-refusal rate at `fitted` (reported, not a gate)."""
    n: int
    cv_gain: float = 0.0
    cv_lo: float = 0.0
    cv_hi: float = 0.0
    """The cross-fitted gain and its paired bootstrap interval: each label's outcome at the τL the
    *other* folds chose, against the serving τL (`CV_FOLDS` folds). The decision rests on `cv_lo`."""
    false_refusal_increase: float = 0.0
    """Answerable questions refused at `fitted` minus at `current`, per answerable sample (the gate)."""
    false_refusal_increase_ci: tuple[float, float] = (0.0, 0.0)
    direction: str = "none"
    """`raise` (answers become refusals: outcomes known from labels), `lower` (refusals become answers
    nobody saw: their correctness is imputed) or `none`."""
    max_false_refusal: float = 0.05
    taus: tuple[dict[str, Any], ...] = ()
    """What the rule chose from: the grid as ranges of τL that refuse the same samples, each with its
    expected accuracy, gain over the serving τL and its interval, false-refusal increase and whether
    it qualifies (an admin reading a "no candidate" needs to see how far each τL fell short)."""

    @property
    def improves(self) -> bool:
        return self.n > 1 and self.lo > 0.0 and self.cv_lo > 0.0 and self.fitted != self.current

    @property
    def off_policy(self) -> bool:
        """Is the gain measured rather than imputed? Raising τL only turns answers into refusals, and
        whether refusing a question is right depends on the question alone (answerable or not), which
        its labels say; lowering τL would serve answers nobody has seen."""
        return self.improves and self.fitted > self.current

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            if isinstance(v, float):
                v = round(v, 6)
            elif isinstance(v, tuple):
                v = [x if isinstance(x, dict) else round(float(x), 6) for x in v]
            out[k] = v
        out["off_policy"] = self.off_policy
        out["improves"] = self.improves
        return out


def _outcomes(scores: np.ndarray, rights: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Per sample at `tau`: is the outcome right (expected value for fractional labels), and the
    expected share of an answerable question refused."""
    refused = scores < tau
    correct = np.where(refused, rights[:, 1], rights[:, 0])
    return correct, (1.0 - rights[:, 1]) * refused


@dataclass(frozen=True)
class _Trial:
    tau: float
    accuracy: float
    gain: float
    lo: float
    hi: float
    fr_increase: float
    fr_ci: tuple[float, float]

    def qualifies(self, max_fr: float) -> bool:
        return self.lo > 0.0 and self.fr_increase <= max_fr + 1e-12

    def outcome(self) -> tuple[float, ...]:
        return (self.accuracy, self.gain, self.lo, self.hi, self.fr_increase, *self.fr_ci)


def _ranges(trials: Sequence[_Trial], max_fr: float) -> tuple[dict[str, Any], ...]:
    """Neighbouring grid points with the same outcome, merged into one τL range (the grid is fine, the
    labelled scores are few: 101 points are a dozen distinct outcomes)."""
    out: list[dict[str, Any]] = []
    prev: tuple[float, ...] | None = None
    for t in trials:
        if t.outcome() == prev:
            out[-1]["tau_to"] = t.tau
            continue
        prev = t.outcome()
        out.append(
            {
                "tau_from": t.tau,
                "tau_to": t.tau,
                "accuracy": round(t.accuracy, 6),
                "gain": round(t.gain, 6),
                "lo": round(t.lo, 6),
                "hi": round(t.hi, 6),
                "false_refusal_increase": round(t.fr_increase, 6),
                "false_refusal_increase_ci": [round(x, 6) for x in t.fr_ci],
                "qualifies": t.qualifies(max_fr),
            }
        )
    return tuple(out)


def _trials(
    scores: np.ndarray, rights: np.ndarray, current: float, taus: Sequence[float], idx: np.ndarray, alpha: float = 0.05
) -> list[_Trial]:
    """Each τ's accuracy and paired-bootstrap gain over `current` (the same resamples for every τ),
    and the change in answerable questions refused per answerable sample, with its interval."""
    base, base_fr = _outcomes(scores, rights, current)
    answerable = 1.0 - rights[:, 1]
    n_ans = max(float(answerable.sum()), 1e-9)
    ans_b = np.maximum(answerable[idx].sum(1), 1e-9)
    seen: dict[bytes, _Trial] = {}
    out = []
    for tau in taus:
        key = (scores < tau).tobytes()
        if key in seen:
            t = seen[key]
            out.append(_Trial(tau, t.accuracy, t.gain, t.lo, t.hi, t.fr_increase, t.fr_ci))
            continue
        correct, fr = _outcomes(scores, rights, tau)
        d, dfr = correct - base, fr - base_fr
        means = d[idx].mean(1)
        lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
        frs = dfr[idx].sum(1) / ans_b
        flo, fhi = np.quantile(frs, [alpha / 2, 1 - alpha / 2])
        t = _Trial(
            tau,
            float(correct.mean()),
            float(d.mean()),
            float(lo),
            float(hi),
            float(dfr.sum() / n_ans),
            (float(flo), float(fhi)),
        )
        seen[key] = t
        out.append(t)
    return out


CV_FOLDS = 5


def _pick(trials: Sequence[_Trial], current: float, max_fr: float) -> _Trial | None:
    """The fit's rule: raises first, then lowerings; among τ whose gain interval lies above 0 and whose
    false-refusal increase is at most `max_fr`, the most accurate (ties: the closest to `current`)."""
    for side in ([t for t in trials if t.tau > current], [t for t in trials if t.tau < current]):
        ok = [t for t in side if t.qualifies(max_fr)]
        if ok:
            return max(ok, key=lambda t: (t.accuracy, -abs(t.tau - current)))
    return None


def _select(
    scores: np.ndarray, rights: np.ndarray, current: float, grid: Sequence[float], idx: np.ndarray, max_fr: float
) -> _Trial | None:
    return _pick(_trials(scores, rights, current, grid, idx), current, max_fr)


def _cross_fitted(
    scores: np.ndarray,
    rights: np.ndarray,
    current: float,
    grid: Sequence[float],
    max_fr: float,
    *,
    resamples: int,
    seed: int,
) -> tuple[float, float, float]:
    """Gain of the *selection rule* out of sample: each fold's labels are scored at the τL `_select`
    picks on the other folds (the serving τL when it picks none), against the serving τL; the mean of
    those per-label differences with its paired bootstrap 95% interval."""
    n = len(scores)
    rng = np.random.default_rng(seed + 1)
    fold = np.empty(n, dtype=np.int64)
    fold[rng.permutation(n)] = np.arange(n) % CV_FOLDS
    base, _ = _outcomes(scores, rights, current)
    diff = np.zeros(n)
    for f in range(CV_FOLDS):
        train, test = fold != f, fold == f
        m = int(train.sum())
        if m < 2 or not test.any():
            continue
        t = _select(scores[train], rights[train], current, grid, rng.integers(0, m, size=(resamples, m)), max_fr)
        correct, _ = _outcomes(scores[test], rights[test], current if t is None else t.tau)
        diff[test] = correct - base[test]
    means = diff[rng.integers(0, n, size=(resamples, n))].mean(1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(diff.mean()), float(lo), float(hi)


def fit_tau_lower(
    samples: Sequence[GateSample],
    current: float,
    *,
    max_false_refusal: float = 0.05,
    resamples: int = 1000,
    seed: int = 20240601,
    grid: Sequence[float] = GRID,
) -> TauFit:
    """The τL that maximises expected accuracy on the labelled samples, among those whose paired
    bootstrap 95% lower bound of the gain over `current` is above 0 and that refuse at most
    `max_false_refusal` more of the answerable samples than `current` does (a change of the false-
    refusal rate against the serving τL, not an absolute bound: with the 20-40 answerable labels a
    few days give, an absolute Wilson bound of 5% fails even at zero false refusals, wilson_upper(0, 25)
    = 0.13, so no τ that refuses anything could ever pass).

    Raises are tried first: raising τL only turns answers into refusals, whose outcome the labels
    give (a refusal is right iff the question is unanswerable), while lowering it turns refusals into
    answers nobody has seen, whose correctness is imputed from neighbours (`gate_labels.impute`). A
    lowering is proposed only when no raise qualifies; `TauFit.off_policy` tells the promotion path
    which kind of evidence the candidate rests on.

    The chosen τ's in-sample interval is optimistic (it won a search over the grid on these very
    labels), so `improves` also needs the cross-fitted interval (`_cross_fitted`) above 0."""
    # an answer refused although its gate score passed the serving τL was refused by a later step
    # (a failed rewrite's grade, the support check): no τL answers it, so it counts as refused at all
    scores = np.array([-1.0 if s.refused and s.score >= current else s.score for s in samples], dtype=np.float64)
    rights = np.array([s.rights for s in samples], dtype=np.float64).reshape(-1, 2)
    n = len(samples)
    n_ans = round(float((1.0 - rights[:, 1]).sum()))
    base_correct, _ = _outcomes(scores, rights, current)
    best: _Trial | None = None
    cv = (0.0, 0.0, 0.0)
    taus: tuple[dict[str, Any], ...] = ()
    if n > 1:
        idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
        trials = _trials(scores, rights, current, grid, idx)
        taus = _ranges(trials, max_false_refusal)
        best = _pick(trials, current, max_false_refusal)
        if best is not None:
            cv = _cross_fitted(scores, rights, current, grid, max_false_refusal, resamples=resamples, seed=seed)
    fitted = current if best is None else best.tau
    correct, fr = _outcomes(scores, rights, fitted)
    gain, lo, hi = (0.0, 0.0, 0.0) if best is None else (best.gain, best.lo, best.hi)
    k_fr = round(float(fr.sum()))
    return TauFit(
        current=current,
        fitted=fitted,
        accuracy_before=float(base_correct.mean()) if n else 0.0,
        accuracy_after=float(correct.mean()) if n else 0.0,
        gain=gain,
        lo=lo,
        hi=hi,
        false_refusal_after=float(fr.sum()) / n_ans if n_ans else 0.0,
        false_refusal_upper=wilson_upper(k_fr, n_ans),
        n=n,
        cv_gain=cv[0],
        cv_lo=cv[1],
        cv_hi=cv[2],
        false_refusal_increase=0.0 if best is None else best.fr_increase,
        false_refusal_increase_ci=(0.0, 0.0) if best is None else best.fr_ci,
        direction="none" if best is None else ("raise" if fitted > current else "lower"),
        max_false_refusal=max_false_refusal,
        taus=taus,
    )


def first_gate_score(trace: Mapping[str, Any] | None) -> float | None:
    """The best grade of the first `grade` record of a stored answer's trace: what τL was compared to."""
    return StoredTrace.load(trace).first_gate_score()


def gate_samples(store: Store, collection: str, *, limit: int = 5000) -> list[GateSample]:
    """Labelled gate scores of the collection's traffic: user ratings, corrections, reviewer labels
    and diagnoses, combined per answer and imputed where a label leaves a fact open (`gate_labels`).
    Labelled answers are not a random sample (users rate more often what went wrong): the fit is a
    candidate for the golden check and an experiment to judge, never a change that serves."""
    return as_gate_samples(labelled_answers(store, collection, first_gate_score, limit=limit))


def as_gate_samples(labelled: Sequence[Labelled]) -> list[GateSample]:
    """Labelled answers as samples of a refusal threshold's fit: labels combined, unknowns imputed from
    neighbours in score (`gate_labels.impute`)."""
    return [
        GateSample(
            score=min(1.0, max(0.0, item.score)),
            answerable=rights[1] < 0.5,
            answer_right=rights[0],
            refusal_right=rights[1],
            refused=item.refused,
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
    """At most this much more of the answerable samples refused than at the serving τL."""
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
