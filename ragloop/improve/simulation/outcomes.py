"""The issue's required outcomes, computed from the arms' held-out measurements exactly as defined
(never redefined to pass): each returns its numbers and whether it is met, or `None` when the arms
it needs were not run.

1. From today's defaults, per data set: day-last e2e accuracy above day 0, significant by the
   paired test (p < 0.05) on the same held-out items; no quality metric drops by more than 2
   points (accuracy, correct refusal, faithfulness, context recall; false refusal rising counts as
   a drop); on MTRAG-UN the final accuracy at least `MTRAG_BASELINE` (the `baseline` config's
   end-to-end accuracy on MTRAG-UN dev, benchmarks/results/eval).
2. From the degraded start: (final - day 0) / (defaults' day 0 - degraded day 0) >= 0.5.
3. Adversarial feedback (50% flipped): no measured day's accuracy more than 2 points below day 0,
   with what the loop attempted (audit) and what stopped it (halted / rejected / reverted).
4. Against the offline optimum (`ragloop improve optimum`): the loop's final held-out accuracy as a
   fraction of the searched config's, on the same held-out items, with a paired bootstrap 95% CI
   of the ratio. The issue sets no threshold, so it is reported, not judged (`met` is None).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragloop.evaluation.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from ragloop.improve.simulation.measure import LOWER_IS_BETTER, paired
from ragloop.improve.simulation.run import ArmResult

MTRAG_BASELINE = 0.375
"""`baseline` (BM25 + extractive, no gates) end-to-end accuracy on MTRAG-UN dev (issue 14's figure)."""
DROP = 0.02
QUALITY = ("e2e_accuracy", "correct_refusal", "false_refusal", "faithfulness", "context_recall")


def _value(arm: ArmResult, day: int, metric: str) -> float | None:
    m = arm.measurements[day].metrics.get(metric)
    return None if m is None or m.n == 0 else float(m.value)


def drops(arm: ArmResult) -> dict[str, float]:
    """Quality metrics that fell by more than DROP from day 0 to the last day (signed change)."""
    out: dict[str, float] = {}
    for metric in QUALITY:
        a, b = _value(arm, 0, metric), _value(arm, -1, metric)
        if a is None or b is None:
            continue
        change = (a - b) if metric in LOWER_IS_BETTER else (b - a)
        if change < -DROP:
            out[metric] = round(b - a, 4)
    return out


def outcome_1(arm: ArmResult) -> dict[str, Any]:
    test = paired(arm.measurements[0], arm.measurements[-1], "e2e_accuracy")
    a0, a1 = _value(arm, 0, "e2e_accuracy"), _value(arm, -1, "e2e_accuracy")
    dropped = drops(arm)
    improved = test is not None and test.diff > 0 and test.significant
    out: dict[str, Any] = {
        "arm": arm.config.label,
        "day0": a0,
        "final": a1,
        "paired": test.to_json() if test else None,
        "drops_over_2pt": dropped,
        "met": bool(improved and not dropped),
    }
    if arm.config.dataset == "mtrag":
        out["mtrag_baseline"] = MTRAG_BASELINE
        out["reaches_baseline"] = a1 is not None and a1 >= MTRAG_BASELINE
        out["met"] = bool(out["met"] and out["reaches_baseline"])
    return out


def outcome_2(degraded: ArmResult, defaults: ArmResult) -> dict[str, Any]:
    d0, d1 = _value(degraded, 0, "e2e_accuracy"), _value(degraded, -1, "e2e_accuracy")
    return recovery(degraded.config.label, d0, d1, _value(defaults, 0, "e2e_accuracy"))


def recovery(label: str, d0: float | None, d1: float | None, ref: float | None) -> dict[str, Any]:
    """Outcome 2 from its three numbers: the degraded arm's day 0 and final held-out accuracy and the
    defaults' day 0 on the same held-out items."""
    gap = None if ref is None or d0 is None else ref - d0
    recovered = None if gap is None or d1 is None or d0 is None or gap <= 0 else (d1 - d0) / gap
    return {
        "arm": label,
        "degraded_day0": d0,
        "degraded_final": d1,
        "defaults_day0": ref,
        "gap": gap,
        "recovered_share": recovered,
        "met": recovered is not None and recovered >= 0.5,
    }


def outcome_3(arm: ArmResult) -> dict[str, Any]:
    a0 = _value(arm, 0, "e2e_accuracy")
    worst = None
    for day in range(1, len(arm.measurements)):
        v = _value(arm, day, "e2e_accuracy")
        if v is not None and a0 is not None and (worst is None or v - a0 < worst[1]):
            worst = (day, v - a0)
    actions = Counter(str(a["action"]) for a in arm.audit)
    stopped = {
        "experiments": Counter(e["status"] for e in arm.experiments),
        "improvement_actions": arm.cost.get("improvement_actions", {}),
    }
    return {
        "arm": arm.config.label,
        "day0": a0,
        "worst_day": None if worst is None else worst[0],
        "worst_change": None if worst is None else round(worst[1], 4),
        "attempted": dict(actions),
        "stopped": {k: dict(v) for k, v in stopped.items()},
        "met": worst is None or worst[1] >= -DROP,
    }


def outcome_4(
    dataset: str,
    loop: dict[str, float],
    optimum: dict[str, float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """mean(loop) / mean(optimum) over the held-out items both scored (item id -> 0/1 accuracy),
    with a percentile 95% CI from resampling those items jointly (the pairing keeps the two
    configs' shared easy and hard items together, so the interval is narrower than two
    independent ones would make it)."""
    ids = sorted(set(loop) & set(optimum))
    a = np.array([loop[i] for i in ids], dtype=float)
    b = np.array([optimum[i] for i in ids], dtype=float)
    out: dict[str, Any] = {"dataset": dataset, "n": len(ids), "met": None}
    if not ids or b.sum() == 0:
        return out | {"loop": None, "optimum": None, "fraction": None, "ci95": None, "summary": "–"}
    idx = np.random.default_rng(seed).integers(0, len(ids), size=(resamples, len(ids)))
    num, den = a[idx].sum(1), b[idx].sum(1)
    ratios = num[den > 0] / den[den > 0]
    lo, hi = (float(x) for x in np.quantile(ratios, [0.025, 0.975]))
    frac = float(a.sum() / b.sum())
    out |= {
        "loop": float(a.mean()),
        "optimum": float(b.mean()),
        "fraction": round(frac, 4),
        "ci95": [round(lo, 4), round(hi, 4)],
    }
    out["summary"] = (
        f"loop final {100 * a.mean():.1f}% / optimum {100 * b.mean():.1f}% = {frac:.3f} "
        f"[{lo:.3f}, {hi:.3f}] (paired bootstrap, n={len(ids)})"
    )
    return out


def outcomes(arms: Sequence[ArmResult]) -> dict[str, Any]:
    by = {(a.config.dataset, a.config.start, a.config.users.flip_share >= 0.5): a for a in arms}
    out: dict[str, Any] = {"1": {}, "2": {}, "3": {}}
    for ds in ("squad", "mtrag"):
        defaults = by.get((ds, "defaults", False))
        if defaults is not None and len(defaults.measurements) > 1:
            out["1"][ds] = outcome_1(defaults)
        degraded = by.get((ds, "degraded", False))
        if degraded is not None and defaults is not None and len(degraded.measurements) > 1:
            out["2"][ds] = outcome_2(degraded, defaults)
        adversarial = by.get((ds, "defaults", True))
        if adversarial is not None and len(adversarial.measurements) > 1:
            out["3"][ds] = outcome_3(adversarial)
    return out
