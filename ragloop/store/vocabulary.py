"""The words the tables hold: evaluation tiers, job statuses, evaluation statuses, failure modes.

Each is a `StrEnum` whose members *are* their database values (`Tier.HEURISTIC == "heuristic"`):
rows read back as plain strings compare and hash equal to the members, JSON and SQL get the plain
value, and renaming a member changes no stored value. They live in the store because it is the
lowest layer that needs them (its CHECK constraints list the tiers and statuses); every layer above
(`improve`, `service`, `web`'s API) imports them from here instead of spelling the strings.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args


class Tier(StrEnum):
    """Who evaluates an answer; an evaluation job's `tier` and an evaluation's `evaluation_tier`."""

    HEURISTIC = "heuristic"
    """Tier 1: cheap signals and a linear model, on every answer (`ragloop.improve.tier1`)."""
    LLM_JUDGE = "llm_judge"
    """Tier 2: the judge, on a routed share (`ragloop.improve.judge`, `ragloop.improve.routing`)."""
    HUMAN = "human"
    """Tier 3: the human review queue; no worker claims these jobs."""
    HUMAN_CANDIDATE = "human_candidate"
    """A job only, never an evaluation: an answer held for the capped daily review intake
    (`ragloop.improve.review_intake`); no worker claims these jobs."""
    DIAGNOSIS = "diagnosis"
    """A job only, never an evaluation: the failure diagnosis of an answer (`ragloop.improve.engine`),
    claimed by workers that have a `DiagnosisEngine`; its verdict is a `diagnoses` row."""


EvaluationTier = Literal[Tier.HEURISTIC, Tier.LLM_JUDGE, Tier.HUMAN]
"""The tiers an evaluation can have (for typed fields: the API's evaluation schemas)."""
EVALUATION_TIERS: tuple[Tier, ...] = get_args(EvaluationTier)
"""The same, in rising authority (human > llm_judge > heuristic)."""
AUTOMATIC_TIERS: tuple[Tier, ...] = (Tier.HEURISTIC, Tier.LLM_JUDGE)
"""The tiers workers claim and evaluate; the others wait for people or for the day's end."""


class JobStatus(StrEnum):
    """An evaluation job's state (`ragloop.store.queue`)."""

    QUEUED = "queued"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"


PENDING: tuple[JobStatus, ...] = (JobStatus.QUEUED, JobStatus.LEASED)
"""Jobs not finished yet."""


class EvaluationStatus(StrEnum):
    """`failed` records a tier that gave up: an answer is never silently left unevaluated; `unqualified`
    a judgement that must not count."""

    COMPLETED = "completed"
    FAILED = "failed"
    UNQUALIFIED = "unqualified"
    """A tier-2 score by a judge that is not the accepted one (`ragloop.experiments.drift.judge_standing`):
    kept for the record and for the judge's own qualification, but read by no decision (every
    consumer of tier-2 scores reads `completed` rows only)."""


class FailureMode(StrEnum):
    """Why an answer failed: the failure classifier's outcomes (the seed's section 4.2), stored in an
    evaluation's `failure_mode` (`ragloop.improve.types` re-exports it for diagnosis)."""

    RANKING_FAILURE = "ranking_failure"
    EMBEDDING_FAILURE = "embedding_failure"
    CHUNKING_FAILURE = "chunking_failure"
    KNOWLEDGE_GAP = "knowledge_gap"
    GENERATION_FAILURE = "generation_failure"
    RETRIEVAL_SUCCESS = "retrieval_success"


ReviewFailureMode = Literal[
    "retrieval_failure",
    FailureMode.CHUNKING_FAILURE,
    FailureMode.EMBEDDING_FAILURE,
    FailureMode.RANKING_FAILURE,
    FailureMode.GENERATION_FAILURE,
    FailureMode.KNOWLEDGE_GAP,
]
"""What a human reviewer may label an answer with (`POST /v1/review/{answer_id}`): the five failure
modes, plus a coarse `retrieval_failure` for a reviewer who cannot tell which retrieval stage failed.
`retrieval_success` is a classifier outcome, not a reviewer's label."""


class DiagnosisStatus(StrEnum):
    """A failure diagnosis's state (`diagnoses`, `ragloop.store.repositories.diagnoses`)."""

    PENDING = "pending"
    """Selected, not tried yet."""
    RETRYING = "retrying"
    """An attempt failed (its error kept); another is due."""
    COMPLETED = "completed"
    FAILED = "failed"
    """Given up after the last attempt; the error says why."""
    SKIPPED = "skipped"
    """Nothing to diagnose against yet (no correction, reference or judge answer)."""


class ActionStatus(StrEnum):
    """An improvement action's state (`improvement_actions`, `ragloop.store.repositories.improvement_actions`)."""

    PROPOSED = "proposed"
    SCHEDULED = "scheduled"
    """Claimed by a scheduler, under a lease."""
    APPLIED = "applied"
    KEPT = "kept"
    """Audited and kept."""
    REVERTED = "reverted"
    FAILED = "failed"
    REJECTED = "rejected"
    """Refused by the scheduler's rules (cap, evidence threshold) or an admin."""


class GapStatus(StrEnum):
    """A knowledge-gap group's state (`knowledge_gaps`)."""

    OPEN = "open"
    ADDRESSED = "addressed"
    DISMISSED = "dismissed"


class GoldenSource(StrEnum):
    """Where a golden entry came from (`golden_set_entries.source`, `golden_candidates.source`)."""

    HUMAN = "human"
    """Written by a person (`POST /v1/golden`, `ragloop golden add`)."""
    AUTO_NOMINATED = "auto_nominated"
    """A production answer the nightly nomination proposed and a reviewer approved (never unapproved)."""
    ADVERSARIAL = "adversarial"
    """Written by the adversarial generator at a coverage gap, approved by a reviewer."""
    IMPORTED = "imported"
    """Read from a JSONL file (`ragloop golden import`)."""


MACHINE_SOURCES: tuple[GoldenSource, ...] = (GoldenSource.AUTO_NOMINATED, GoldenSource.ADVERSARIAL)
"""Sources that reach the golden set only through the review queue."""


class GoldenDifficulty(StrEnum):
    """A golden entry's difficulty; the set's mix is reported against a configurable target."""

    EASY = "easy"
    STANDARD = "standard"
    HARD = "hard"


class GoldenChange(StrEnum):
    """What one golden-set version did (`golden_set_versions.kind`)."""

    ADD = "add"
    IMPORT = "import"
    REVISE = "revise"
    DEPRECATE = "deprecate"
    APPROVE = "approve"
    """A reviewed candidate entered the set."""
    BACKFILL = "backfill"
    """Reconstructed by migration 0008_golden from rows written before versions were stamped."""


class CandidateStatus(StrEnum):
    """A golden candidate's state in the review queue (`golden_candidates.status`)."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
