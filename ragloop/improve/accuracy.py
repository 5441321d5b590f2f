"""How well the classifier recovers injected failures: per-class precision and recall with 95%
intervals, the confusion matrix, and the threshold search on the dev part.

Precision of class c is a mean over the items *predicted* c (1 when the label is c), recall a
mean over the items *labelled* c; both get the harness's percentile bootstrap over those items
(`ragloop.evaluation.stats.bootstrap_ci`, fixed seed), so the intervals are the same kind the
evaluation reports carry.

The search is coordinate-wise (one threshold at a time over its grid, the others held, two
rounds, each value scored with its grid neighbours, see `search_thresholds`): the tree has eight
thresholds and a full grid would classify the dev set thousands of
times for no measurable gain. Its objective is the worst per-class min(precision, recall): the
target is "every class >= 0.85", so the weakest class is what a threshold must improve; macro
F1 breaks ties, then the grid order (the first value wins), so the choice is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragloop.evaluation.stats import Estimate, bootstrap_ci
from ragloop.improve.classifier import classify
from ragloop.improve.types import DiagnosisInput, FailureMode, Thresholds

GRID: dict[str, tuple[float, ...]] = {
    "oracle": tuple(round(0.05 * i, 2) for i in range(2, 19)),
    "oracle_relative": (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8),
    "split_gain": (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4),
    "split_score": (0.2, 0.3, 0.4, 0.5, 0.6, 0.7),
    "faithfulness": (0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "claim_support": (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95),
    "context_precision": (0.0, 0.1, 0.2, 0.3, 0.5, 0.8),
    "background_quantile": (0.5, 0.75, 0.8, 0.85, 0.9, 0.95),
}


@dataclass(frozen=True)
class ClassScore:
    mode: FailureMode
    n: int
    """Items labelled with this class."""
    predicted: int
    precision: Estimate
    recall: Estimate

    @property
    def f1(self) -> float:
        p, r = self.precision.value, self.recall.value
        if math.isnan(p) or math.isnan(r) or p + r == 0:
            return 0.0
        return 2 * p * r / (p + r)

    def to_json(self) -> dict[str, object]:
        return {
            "mode": self.mode.value,
            "n": self.n,
            "predicted": self.predicted,
            "precision": self.precision.to_json(),
            "recall": self.recall.to_json(),
            "f1": round(self.f1, 6),
        }


def class_scores(labels: Sequence[FailureMode], predicted: Sequence[FailureMode]) -> list[ClassScore]:
    if len(labels) != len(predicted):
        raise ValueError(f"{len(labels)} labels but {len(predicted)} predictions")
    out = []
    for mode in FailureMode:
        rec = [float(p == mode) for y, p in zip(labels, predicted, strict=True) if y == mode]
        prec = [float(y == mode) for y, p in zip(labels, predicted, strict=True) if p == mode]
        out.append(ClassScore(mode, len(rec), len(prec), bootstrap_ci(prec), bootstrap_ci(rec)))
    return out


def confusion(labels: Sequence[FailureMode], predicted: Sequence[FailureMode]) -> dict[str, dict[str, int]]:
    """label -> predicted -> count, every class present."""
    out = {y.value: {p.value: 0 for p in FailureMode} for y in FailureMode}
    for y, p in zip(labels, predicted, strict=True):
        out[y.value][p.value] += 1
    return out


def objective(scores: Sequence[ClassScore]) -> tuple[float, float]:
    """(worst per-class min(precision, recall), macro F1) over the classes present."""
    present = [s for s in scores if s.n > 0]
    if not present:
        return (0.0, 0.0)

    def v(e: Estimate) -> float:
        return 0.0 if math.isnan(e.value) else e.value

    worst = min(min(v(s.precision), v(s.recall)) for s in present)
    return (worst, sum(s.f1 for s in present) / len(present))


def _point_scores(labels: Sequence[FailureMode], predicted: Sequence[FailureMode]) -> tuple[float, float]:
    """`objective` without the intervals (the search calls it thousands of times)."""
    worst, f1s = 1.0, []
    for mode in FailureMode:
        tp = sum(1 for y, p in zip(labels, predicted, strict=True) if y == mode and p == mode)
        n = sum(1 for y in labels if y == mode)
        m = sum(1 for p in predicted if p == mode)
        if n == 0:
            continue
        p_, r_ = (tp / m if m else 0.0), tp / n
        worst = min(worst, p_, r_)
        f1s.append(0.0 if p_ + r_ == 0 else 2 * p_ * r_ / (p_ + r_))
    return (worst, sum(f1s) / len(f1s)) if f1s else (0.0, 0.0)


def predict(inputs: Sequence[DiagnosisInput], t: Thresholds) -> list[FailureMode]:
    return [classify(i, t).mode for i in inputs]


SEARCH_START = Thresholds(
    oracle=0.5,
    oracle_relative=0.0,
    split_gain=0.2,
    split_score=0.5,
    faithfulness=0.7,
    claim_support=0.5,
    context_precision=0.3,
)
"""Where the search starts: the seed's faithfulness 0.7, the harness's support threshold 0.5,
no relative cut; the search is path-dependent, so the start is fixed, not `Thresholds()`."""


def search_thresholds(
    inputs: Sequence[DiagnosisInput],
    labels: Sequence[FailureMode],
    *,
    start: Thresholds | None = None,
    grid: Mapping[str, Sequence[float]] | None = None,
    rounds: int = 2,
) -> tuple[Thresholds, list[dict[str, object]]]:
    """The thresholds maximising the *robust* `objective` on (inputs, labels), and the trail.

    Robust: a value's worst-class score is the lowest of its own and its grid neighbours' (the
    other thresholds held); its own macro F1 breaks ties. A threshold on the edge of a cliff is
    not a measurement: on the injected set the lexical judge gives every verbatim claim
    p = 0.862, so claim_support 0.85 scores best and 0.9 calls every answer unfaithful; a real
    generator's paraphrased claims land lower."""
    grid = grid or GRID
    best = start or SEARCH_START
    cache: dict[Thresholds, tuple[float, float]] = {}

    def point(t: Thresholds) -> tuple[float, float]:
        if t not in cache:
            cache[t] = _point_scores(labels, predict(inputs, t))
        return cache[t]

    def robust(t: Thresholds, name: str, values: Sequence[float]) -> tuple[float, float]:
        v = getattr(t, name)
        i = list(values).index(v) if v in values else -1
        near = [values[j] for j in (i - 1, i + 1) if i >= 0 and 0 <= j < len(values)]
        worst = min(point(x)[0] for x in [t, *(t.model_copy(update={name: x}) for x in near)])
        return (worst, point(t)[1])

    trail: list[dict[str, object]] = []
    for rnd in range(rounds):
        for name, values in grid.items():
            best_key = robust(best, name, values)
            for value in values:
                cand = best.model_copy(update={name: value})
                key = robust(cand, name, values)
                trail.append(
                    {"round": rnd, name: value, "worst_min_pr": round(key[0], 6), "macro_f1": round(key[1], 6)}
                )
                if key > best_key:
                    best, best_key = cand, key
    return best, trail
