"""A/B experiments between pipeline versions: assignment, statistics, promotion decisions.

- `stats`: per-arm summaries and `compare` — Welch's t-test for reporting and an always-valid
  (mixture SPRT) p-value and confidence sequence on the difference, valid at every look.
- `decisions`: `promotable` (samples, always-valid p, minimum effect) and `check_guardrail`
  (a significant regression beyond 2%).
- `assignment`: consistent hashing of session ids to variants, cached in Redis when configured;
  a non-running experiment (halted by a guardrail, stopped, promoted) sends everyone to control.
- `simulation`: synthetic week-long experiments looked at every aggregation window, the study
  behind `benchmarks/experiments_sim.py`.

Sits above `ragloop.evaluation` and below `ragloop.service`; imports neither service, cli, web nor
improve.
"""

from ragloop.experiments.assignment import (
    Assigner,
    Assignment,
    ComputedAssigner,
    ExperimentStatus,
    RedisCachedAssigner,
    Variant,
    bucket,
    hashed_variant,
    make_assigner,
)
from ragloop.experiments.decisions import (
    Blocker,
    Direction,
    GuardrailCheck,
    PromotionDecision,
    check_guardrail,
    promotable,
)
from ragloop.experiments.stats import (
    UNBOUNDED,
    ArmSummary,
    Comparison,
    Interval,
    SequentialDesign,
    WelchTest,
    check_split,
    compare,
    mixture_log_e,
    mixture_radius,
    tuned_rho,
    welch,
)

__all__ = [
    "UNBOUNDED",
    "ArmSummary",
    "Assigner",
    "Assignment",
    "Blocker",
    "Comparison",
    "ComputedAssigner",
    "Direction",
    "ExperimentStatus",
    "GuardrailCheck",
    "Interval",
    "PromotionDecision",
    "RedisCachedAssigner",
    "SequentialDesign",
    "Variant",
    "WelchTest",
    "bucket",
    "check_guardrail",
    "check_split",
    "compare",
    "hashed_variant",
    "make_assigner",
    "mixture_log_e",
    "mixture_radius",
    "promotable",
    "tuned_rho",
    "welch",
]
