"""What every remediation is: a typed action with its evidence and expected delta, `apply` that
returns what changed (`AppliedChange`, stored as the action's revert payload), and `revert`.

Three effects, one rule each (LOOP.md: direct fixes are local and reversible; global changes are
candidates):
- DIRECT: changes what one query group or one document serves (an expansion-cache entry, a
  per-document re-chunk). Capped per domain per day, serialised per component, measured by the
  auditor after its window and reverted when the interval says it did not help.
- CANDIDATE: registers a pipeline version with status `candidate` (a fusion refit, a per-collection
  threshold fit). Never activated here: the experiments' promotion path decides.
- RECORD: changes nothing that serves (a knowledge-gap log link, a tuple added to the ranking buffer).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ragloop.config.pipeline import PipelineConfig
from ragloop.improve.clock import SYSTEM_CLOCK, Clock
from ragloop.improve.types import ActionKind
from ragloop.models.scoring import Scorer
from ragloop.retrieval.collection import Collection
from ragloop.store import ImprovementAction, Store


class Effect(StrEnum):
    DIRECT = "direct"
    CANDIDATE = "candidate"
    RECORD = "record"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class QueryGroup(_Frozen):
    """The queries an action claims to help, and what counts as finding the answer for them: a
    hit whose chunk id is in `chunk_ids`, or whose text holds one of `passages` whole (a re-chunk
    changes chunk ids, so its target is the supporting sentence)."""

    collection: str
    questions: tuple[str, ...]
    chunk_ids: tuple[str, ...] = ()
    passages: tuple[str, ...] = ()
    k: int = Field(default=5, ge=1)


class GroupMeasurement(_Frozen):
    """Per-question share of the group's targets found in the top k, in `group.questions` order."""

    scores: tuple[float, ...]
    measured_at: str
    generation: int

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0


class AuditNote(_Frozen):
    """A further audit entry the apply produced (a refit decision, a buffer consumed), written in
    the same transaction as the action's own entry, with `refers_to` = that entry."""

    action_type: str
    evidence: dict[str, Any]
    pipeline_version_before: str | None = None
    pipeline_version_after: str | None = None


class AppliedChange(_Frozen):
    kind: ActionKind
    effect: Effect
    summary: str
    revert: dict[str, Any] = Field(default_factory=dict)
    """What `revert` needs (the previous state), as JSON."""
    group: QueryGroup | None = None
    baseline: GroupMeasurement | None = None
    """The group measured just before the change (DIRECT effects): the auditor's "before"."""
    candidate_version: str | None = None
    notes: tuple[AuditNote, ...] = ()


class ActionSpec(_Frozen):
    """A stored improvement action as the remediations read it."""

    action_id: str
    kind: ActionKind
    component: str
    dedupe_key: str = ""
    domain: str | None = None
    answer_ids: tuple[str, ...] = ()
    evidence: dict[str, Any] = Field(default_factory=dict)
    expected_delta: dict[str, Any] | None = None
    payload: dict[str, Any] = Field(default_factory=dict)
    attempts: int = 0

    @classmethod
    def from_row(cls, row: ImprovementAction) -> ActionSpec:
        return cls(
            action_id=row.action_id,
            kind=ActionKind(row.kind),
            component=row.component,
            dedupe_key=row.dedupe_key,
            domain=row.domain,
            answer_ids=tuple(row.answer_ids or ()),
            evidence=dict(row.evidence or {}),
            expected_delta=dict(row.expected_delta) if row.expected_delta is not None else None,
            payload=dict(row.payload or {}),
            attempts=row.attempts,
        )

    @property
    def confidence(self) -> float:
        """The diagnosis' confidence (the classifier maps its margins to [0.5, 1]); 0.5 when absent."""
        value = self.evidence.get("confidence", 0.5)
        return float(value) if isinstance(value, int | float) else 0.5

    @property
    def user_reported(self) -> bool:
        """A user said the answer was wrong (negative feedback or a correction): urgent."""
        if self.evidence.get("user_reported"):
            return True
        reasons = self.evidence.get("reasons") or ()
        return any(r in ("negative_feedback", "correction") for r in reasons)


class RemediationSettings(_Frozen):
    expansion_threshold: float = Field(default=0.90, gt=0.0, le=1.0)
    """cos(query, cached failed query) above which the cached oracle chunks are pre-loaded."""
    expansion_max_chunks: int = Field(default=5, ge=1)
    rechunk_growth: float = Field(default=1.6, gt=1.0)
    """A re-chunked document's size: current size x this (the seed's 512 -> 800)."""
    rechunk_overlap_share: float = Field(default=0.25, ge=0.0, lt=1.0)
    """...and its overlap: this share of the new size (the seed's 200 of 800)."""
    rechunk_steps: int = Field(default=3, ge=1)
    """Sizes the re-chunk preview tries, growing by `rechunk_growth` each (200 -> 320, 512, 819): the
    smallest whose preview gains is applied. One step was the fixed rule; on MTRAG-UN's degraded
    start most one-step merges still missed a dense top 2 and were reverted a day later."""
    ranking_buffer_size: int = Field(default=12, ge=2)
    """Tuples the ranking buffer waits for before its refit. The refit decides on its own cross-fitted
    bootstrap interval (folds of alternate queries), so the count only has to give each fold a few
    queries. At 50 the buffer never filled in a simulated week: a ranking tuple needs a completed
    diagnosis, which needs an ideal answer (a reviewer's or user's correction, a golden reference),
    and the degraded SQuAD arm (dense, top-k 2) produced about 3 ranking diagnoses a day."""
    chunking_buffer_size: int = Field(default=8, ge=2)
    """Distinct documents with a chunking failure before the collection-wide chunking fit
    (`ragloop.improve.remediation.chunking`): one document is the per-document re-chunk's business;
    failures across many say the collection's chunk size is wrong, and re-chunks of the documents
    traffic happened to name never reach the others."""
    chunking_steps: int = Field(default=4, ge=1)
    """Sizes the chunking fit tries, growing by `rechunk_growth` from the serving size (200 -> 320,
    512, 819, 1311): one more than the re-chunk, so a fit from a small start can reach the default."""
    ranking_depth: int = Field(default=100, ge=1)
    """How deep the refit looks for an oracle chunk (reciprocal rank 0 below it)."""
    paraphrases: bool = True
    """Add the offline paraphrases of each question to an action's query group."""
    answer_check: str | None = None
    """The reader the answer-check fit may turn on (`RAGLOOP_ANSWER_CHECK`, e.g.
    `llm:local:qwen2.5-coder-1.5b`); None: the fit is never proposed (it costs a model call per answer)."""
    resamples: int = Field(default=1000, ge=100)
    seed: int = 20240601


@dataclass
class RemediationContext:
    """What remediations and the auditor act on. `collections` maps a collection (domain) name to
    its `Collection`; `expansion_backend` to its expansion-cache backend (Redis or the registry)."""

    store: Store
    config: PipelineConfig
    collections: Callable[[str], Collection]
    expansion_backend: Callable[[str], Any]
    clock: Clock = SYSTEM_CLOCK
    settings: RemediationSettings = field(default_factory=RemediationSettings)
    scorers: Mapping[str, Scorer] = field(default_factory=dict)
    """Scorers by name that remediations use instead of building one (test doubles, a shared instance)."""
    serving_at_apply: str | None = None
    """The version serving (its id; "" before any activation) when the scheduler began the apply under
    way, read back by `check_serving`; None outside an apply, where nothing is checked."""


CANDIDATE_SOURCE = "remediation:"
"""`created_by` prefix of the candidates remediations register (`ragloop.experiments.auto` starts an
experiment for each; kept equal to its `SOURCE_PREFIX`, which a test checks)."""


class SupersededError(RuntimeError):
    """The version a remediation was fitted on stopped serving while it ran: its evidence describes a
    pipeline no user gets any more. The scheduler undoes what it did and hands the action back to the
    next pass, which fits it on the new version."""

    def __init__(self, fitted_on: str, serving: str) -> None:
        super().__init__(f"{serving} was activated while this was applied on {fitted_on or 'the defaults'}")
        self.fitted_on, self.serving = fitted_on, serving


def check_serving(ctx: RemediationContext) -> None:
    """SupersededError when another version was activated since the apply under way began (compared by
    the stored ids, not by `ctx.config`'s hash, which a config field added since the version was
    stored would change); nothing outside an apply."""
    if ctx.serving_at_apply is None:
        return
    current = ctx.store.pipelines.current()
    now = current.version_id if current is not None else ""
    if now != ctx.serving_at_apply:
        raise SupersededError(ctx.serving_at_apply, now)


def register_candidate(ctx: RemediationContext, config: PipelineConfig, kind: ActionKind, description: str) -> str:
    """Register a candidate derived from the serving version: its parent is that version (what the
    evidence was gathered on, so a stale candidate can be rebased) and its creator
    `remediation:<kind>` (how the auto-experiment step finds machine-made candidates).
    SupersededError when another version was activated while the candidate was fitted: registered,
    the auto-experiment step would rebase it and trial a change whose evidence nobody records."""
    check_serving(ctx)
    row = ctx.store.pipelines.register_config(
        config,
        description=description,
        parent_version_id=ctx.config.version_id,
        created_by=f"{CANDIDATE_SOURCE}{kind.value}",
    )
    return row.version_id


P = TypeVar("P", bound=BaseModel)


class Remediation(ABC, Generic[P]):
    """One action kind. Subclasses set the class attributes and implement apply/revert."""

    kind: ClassVar[ActionKind]
    effect: ClassVar[Effect]
    cost: ClassVar[float]
    """Relative cost (1 = an expansion-cache entry); the scheduler divides priority by it."""
    payload_type: ClassVar[type[BaseModel]]

    def __init__(self, spec: ActionSpec) -> None:
        self.spec = spec
        self.payload: P = self.payload_type.model_validate(spec.payload)  # type: ignore[assignment]

    @property
    def evidence(self) -> Mapping[str, Any]:
        return self.spec.evidence

    @property
    def expected_delta(self) -> Mapping[str, Any]:
        return self.spec.expected_delta or {}

    @classmethod
    def conflict_key(cls, component: str, dedupe_key: str) -> str:
        """Two actions with the same key conflict (one in flight or unaudited at a time). By default
        the row's component; a kind whose actions touch disjoint parts of one component narrows it."""
        return component

    def ready(self, ctx: RemediationContext) -> str | None:
        """None when it can be applied now; otherwise why it waits (it stays proposed)."""
        return None

    def group(self, ctx: RemediationContext) -> QueryGroup | None:
        """The query group the auditor measures (DIRECT effects); None for the others."""
        return None

    def preview(
        self, ctx: RemediationContext, group: QueryGroup, baseline: GroupMeasurement
    ) -> GroupMeasurement | None:
        """The group measured as it would be after `apply`, with nothing that serves changed (a kind
        with several ways to apply may try them against `baseline`; `apply` then takes the one
        measured); the scheduler applies only a change whose preview can gain. None: this kind
        cannot tell before it is applied (the auditor's measurement after the window decides alone)."""
        return None

    @abstractmethod
    def apply(self, ctx: RemediationContext) -> AppliedChange: ...

    @abstractmethod
    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None: ...


class RemediationError(RuntimeError):
    """A remediation that cannot be applied as proposed (bad payload, missing document...)."""
