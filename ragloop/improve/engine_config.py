"""The diagnosis pass's knobs and its report (`ragloop.improve.engine`), apart so the engine stays about
diagnosing: what `RAGLOOP_DIAGNOSIS_*` sets, and what one pass did."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from ragloop.improve.types import FailureMode


@dataclass(frozen=True)
class DiagnosisConfig:
    """The pass's knobs; `RAGLOOP_DIAGNOSIS_<FIELD>` in the environment (e.g. `RAGLOOP_DIAGNOSIS_SCORER`)."""

    scorer: str = "lexical"
    """Scores chunks against the ideal answer and assesses the answer: the scorer the tree's thresholds
    were chosen with (benchmarks/diagnosis_accuracy.py)."""
    heuristic_threshold: float = 0.6
    """A tier-1 score below this selects the answer (the tier-2 routing threshold)."""
    judge_threshold: float = 0.5
    """A tier-2 overall score below this selects the answer."""
    timeout_s: float = 120.0
    """One diagnosis (retrievals, scorer calls, paraphrases) may take this long before it is a failed attempt."""
    lease_seconds: float = 300.0
    select_limit: int = 200
    default_collection: str = "default"

    def __post_init__(self) -> None:
        if self.timeout_s >= self.lease_seconds:
            raise ValueError("the diagnosis timeout must be shorter than its lease")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> DiagnosisConfig:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"RAGLOOP_DIAGNOSIS_{f.name.upper()}")
            if raw is not None and raw.strip():
                default = getattr(cls, f.name)
                try:
                    values[f.name] = type(default)(raw.strip())
                except ValueError as exc:
                    raise ValueError(f"RAGLOOP_DIAGNOSIS_{f.name.upper()}={raw!r}: {exc}") from None
        if "default_collection" not in values and env.get("RAGLOOP_COLLECTION", "").strip():
            values["default_collection"] = env["RAGLOOP_COLLECTION"].strip()
        values.update(overrides)
        return cls(**values)


class Outcome(StrEnum):
    COMPLETED = "completed"
    SKIPPED = "skipped"
    RETRY = "retry"
    FAILED = "failed"
    LEASE_LOST = "lease_lost"


class ParaphraseFailedError(RuntimeError):
    """The paraphrase model failed on an attempt that is not the last: retry for real paraphrases."""


@dataclass
class PassReport:
    selected: int = 0
    skipped: int = 0
    swept: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    modes: Counter[str] = field(default_factory=Counter)
    gaps_logged: int = 0
    actions_proposed: int = 0
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "selected": self.selected,
            "skipped": self.skipped,
            "swept": self.swept,
            "diagnosed": self.outcomes.get(Outcome.COMPLETED, 0),
            "outcomes": dict(self.outcomes),
            "failure_modes": dict(self.modes),
            "knowledge_gaps_logged": self.gaps_logged,
            "actions_proposed": self.actions_proposed,
            "errors": self.errors[:20],
        }


@dataclass(frozen=True)
class Done:
    outcome: Outcome
    mode: FailureMode | None = None
    gap: bool = False
    actions: int = 0
