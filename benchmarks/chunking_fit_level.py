"""How often the chunking fit qualifies a size that does not help, over a week of looks, and how
often it finds one that does: the three rules the fit has had, on the same simulated pools.

A fit runs again each time the pooled chunking failures grow (MTRAG-UN degraded, 7 simulated days:
looks at 8, 10, 12, 16, 20, 25, 31 and 32 items), so a rule's level per look is not its error rate
over the week. Each pool is drawn the way the real fits look: an item differs at the largest size
with probability `--differ`, the smaller sizes differ on a nested subset of those items (a passage
that an 819 chunk holds whole, a 1310 chunk holds too) with the same sign, and the smallest size
differs on its own items. Under the null each difference's sign is a fair coin; under the
alternative it is a gain with probability `--gain-share`.

Rules (each at the family-wise one-sided level 0.025 over four sizes, `SizeTrial.qualifies` today):
- `percentile`: the Bonferroni-level percentile interval above 0 (stop 31);
- `bonferroni-exact`: that, and each size's exact sign-flip p <= 0.025 / 4 (stop 32);
- `max-T`: that interval, and the family-wise p of the max statistic <= 0.025 at every look (stop 33);
- `spent, full at F`: the same, each look held to an allowance of 0.025 x min(1, m / F) on its m
  differing items less what the earlier looks spent, spending its exact test's attained size
  (`fit_sizes(spent_before=..., full_information=F)`). F = 1 spends all that is left at the first
  look that could reject (on 5 or fewer differing items none can); the fit uses
  `FULL_INFORMATION`. Every schedule holds the week at 0.025; they differ in power, and the
  schedule kept is the one finding the most gain weeks averaged over the `--differ` values.

    PYTHONPATH=. .venv/bin/python benchmarks/chunking_fit_level.py --weeks 1000
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np
from _common import machine, markdown_table, print_table, write_results

from ragloop.evaluation.stats import paired_test, proportion_ci
from ragloop.improve.remediation.chunking import ALPHA, FULL_INFORMATION, SizeTrial, fit_sizes

LOOKS = (8, 10, 12, 16, 20, 25, 31, 32)
SIZES = ((320, 48), (512, 77), (819, 123), (1310, 197))
NESTED = (0.3, 0.6)  # share of the largest size's differing items on which 512 and 819 differ too
OWN = 0.15  # share of items on which 320 differs, on its own


def pool(rng: np.random.Generator, n: int, differ: float, gain_share: float) -> tuple[np.ndarray, np.ndarray]:
    """(before, afters): 0/1 target recall of `n` pooled failures at the serving size and each size.
    An item the largest size changes gains (found only after) or loses (found only before)."""
    family = rng.random(n) < differ
    own = ~family & (rng.random(n) < OWN / (1 - differ))  # 320's items: ~OWN of all
    sign = np.where(family, np.where(rng.random(n) < gain_share, 1.0, -1.0), np.where(rng.random(n) < 0.5, 1.0, -1.0))
    before = np.where((family | own) & (sign < 0), 1.0, 0.0)
    largest = sign * family
    diffs = [sign * own, *(largest * (rng.random(n) < share) for share in NESTED), largest]
    return before, before + np.stack(diffs)


SCHEDULES = tuple(sorted({1, 8, 12, FULL_INFORMATION, 24}))
PER_LOOK = ("percentile", "bonferroni-exact", "max-T")
RULES = (*PER_LOOK, *(f"spent, full at {f}" for f in SCHEDULES))


def per_look(trials: Sequence[SizeTrial]) -> dict[str, bool]:
    """The rules that hold each look to its own level: they ignore what earlier looks spent."""
    level = ALPHA / 2
    return {
        "percentile": any(t.delta.lo > 0.0 for t in trials),
        "bonferroni-exact": any(t.delta.lo > 0.0 and t.delta.p <= level / len(trials) for t in trials),
        "max-T": any(t.delta.lo > 0.0 and t.p_family <= level for t in trials),
    }


def week(rng: np.random.Generator, differ: float, gain_share: float, seed: int) -> dict[str, int | None]:
    """The first look at which each rule qualified some size (None: none did all week)."""
    before, afters = pool(rng, LOOKS[-1], differ, gain_share)
    first: dict[str, int | None] = dict.fromkeys(RULES)
    spent = dict.fromkeys(SCHEDULES, 0.0)
    for n in LOOKS:
        hits: dict[str, bool] = {}
        for full in SCHEDULES:
            fit = fit_sizes(
                SIZES, before[:n].tolist(), afters[:, :n].tolist(),
                spent_before=spent[full], full_information=full, resamples=1000, seed=seed,
            )  # fmt: skip
            spent[full] += fit.spent
            hits[f"spent, full at {full}"] = fit.chosen is not None
        hits.update(per_look(fit.trials))  # intervals and p-values: the same whatever the schedule
        for rule, hit in hits.items():
            if hit and first[rule] is None:
                first[rule] = n
    return first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--weeks", type=int, default=1000, help="simulated weeks per scenario")
    ap.add_argument("--differ", type=float, nargs="+", default=[0.2, 0.4, 0.6])
    ap.add_argument("--gain-share", type=float, default=0.85, help="the alternative's share of gains")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--name", default="chunking_fit_level")
    args = ap.parse_args()
    rows, payload = [], []
    found: dict[str, dict[str, list[float]]] = {"null": {}, "gain": {}}  # rule -> 0/1 per week, all differ
    for differ in args.differ:
        for scenario, gain_share in (("null", 0.5), ("gain", args.gain_share)):
            rng = np.random.default_rng(args.seed)
            weeks = [week(rng, differ, gain_share, args.seed + i) for i in range(args.weeks)]
            for rule in RULES:
                found[scenario].setdefault(rule, []).extend(float(w[rule] is not None) for w in weeks)
                firsts = [f for w in weeks if (f := w[rule]) is not None]
                est = proportion_ci(len(firsts), len(weeks))
                median = float(np.median(firsts)) if firsts else None
                share = f"{est.value:.3f} [{est.lo:.3f}, {est.hi:.3f}]"
                rows.append([scenario, differ, rule, share, len(weeks), median])
                payload.append(
                    {"scenario": scenario, "differ": differ, "gain_share": gain_share, "rule": rule,
                     "qualified_share": est.value, "lo": est.lo, "hi": est.hi, "weeks": len(weeks),
                     "median_first_look": median}
                )  # fmt: skip
    headers = ["scenario", "differ", "rule", "weeks with a qualified size [95% CI]", "n", "median first look"]
    print_table("Chunking fit: a size qualified within a week of looks", headers, rows)
    schedules, summary = schedule_summary(found)
    s_headers = ["schedule", "null weeks through [95% CI]", "gain weeks found [95% CI]",
                 f"gain vs full at {FULL_INFORMATION}, paired [95% CI]", "p", "n"]  # fmt: skip
    print_table("Spending schedules, over every `differ` value", s_headers, summary)
    md = "\n".join(
        [
            "# Chunking fit: false and true qualifications over a week of looks",
            "",
            "Command: `PYTHONPATH=. .venv/bin/python benchmarks/chunking_fit_level.py "
            f"--weeks {args.weeks} --seed {args.seed}`",
            "",
            f"- machine: {machine()}",
            f"- looks at {', '.join(map(str, LOOKS))} pooled failures; sizes {[s for s, _ in SIZES]}; "
            f"`null`: each difference's sign a fair coin; `gain`: {args.gain_share:.0%} of differences are gains",
            "- `differ`: the share of pooled failures the largest size changes (MTRAG-UN's real fits: 0.3-0.4)",
            "",
            markdown_table(headers, rows),
            "",
            "## Spending schedules, over every `differ` value",
            "",
            markdown_table(s_headers, summary),
        ]
    )
    write_results(args.name, {"looks": list(LOOKS), "rows": payload, "schedules": schedules}, md)


def schedule_summary(found: dict[str, dict[str, list[float]]]) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """Each schedule's share of null weeks let through and of gain weeks found, pooled over the
    `differ` values, and its paired difference in gain weeks from the fit's schedule (same weeks)."""
    current = found["gain"][f"spent, full at {FULL_INFORMATION}"]
    payload, rows = [], []
    for full in SCHEDULES:
        rule = f"spent, full at {full}"
        null, gain = found["null"][rule], found["gain"][rule]
        n_est, g_est = proportion_ci(int(sum(null)), len(null)), proportion_ci(int(sum(gain)), len(gain))
        vs = paired_test(current, gain)
        payload.append(
            {"full_information": full, "null": n_est.to_json(), "gain": g_est.to_json(),
             "gain_vs_current": {"diff": vs.diff, "lo": vs.lo, "hi": vs.hi, "p": vs.p_value, "n": vs.n}}
        )  # fmt: skip
        rows.append(
            [full, f"{n_est.value:.3f} [{n_est.lo:.3f}, {n_est.hi:.3f}]",
             f"{g_est.value:.3f} [{g_est.lo:.3f}, {g_est.hi:.3f}]",
             f"{vs.diff:+.3f} [{vs.lo:+.3f}, {vs.hi:+.3f}]", f"{vs.p_value:.4f}", vs.n]
        )  # fmt: skip
    return payload, rows


if __name__ == "__main__":
    main()
