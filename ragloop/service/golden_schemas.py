"""Request and response bodies of the golden-set routes (`/v1/golden…`, admin).

The response models are the contract the admin page builds on; `GoldenCandidatePublic` is also the
review's guard: it has no score, rating, evidence or answer-id field, and FastAPI drops whatever a
model does not declare, so a reviewer's view cannot leak the machine's scores even if a row did.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from ragloop.service.schemas import COLLECTION_PATTERN, RequestModel


class GoldenEntryPublic(BaseModel):
    entry_id: str
    lineage_id: str
    version: int
    question: str
    expected_answer: str
    required_doc_ids: list[str]
    required_chunk_ids: list[str]
    source: str
    difficulty: str
    domain_tags: list[str]
    held_out: bool
    created_by: str
    approved_at: str | None
    created_at: str
    deprecated_at: str | None
    added_in: int | None
    deprecated_in: int | None
    superseded_by: str | None


class GoldenSetPublic(BaseModel):
    golden_set_version: int
    """The set's current version, or the version asked for."""
    count: int
    held_out: int
    entries: list[GoldenEntryPublic]


class MixRowPublic(BaseModel):
    difficulty: str
    count: int
    n: int
    share: float | None
    ci95: list[float] | None
    target: float
    verdict: Literal["below", "above", "on_target", "no_data"]


class GoldenSummaryPublic(BaseModel):
    golden_set_version: int
    count: int
    held_out: int
    by_source: dict[str, int]
    mix: list[MixRowPublic]


class GoldenVersionPublic(BaseModel):
    version: int
    kind: str
    actor: str
    note: str | None
    added: list[str]
    deprecated: list[str]
    created_at: str


class GoldenVersionsPublic(BaseModel):
    golden_set_version: int
    versions: list[GoldenVersionPublic]


class GoldenChangedPublic(BaseModel):
    lineage_id: str
    fields: list[str]
    before: GoldenEntryPublic
    after: GoldenEntryPublic


class GoldenDiffPublic(BaseModel):
    from_version: int
    to_version: int
    added: list[GoldenEntryPublic]
    deprecated: list[GoldenEntryPublic]
    changed: list[GoldenChangedPublic]
    unchanged: int


class GoldenCandidatePublic(BaseModel):
    """A candidate as a reviewer sees it: question and proposed answer, never how the machine rated it."""

    candidate_id: str
    question: str
    proposed_answer: str
    source: str
    required_doc_ids: list[str]
    required_chunk_ids: list[str]
    difficulty: str
    domain_tags: list[str]
    status: Literal["pending", "approved", "rejected"]
    created_at: str
    reviewed_by: str | None
    reviewed_at: str | None
    review_note: str | None
    answer_edited: bool | None
    entry_id: str | None


class GoldenReviewQueuePublic(BaseModel):
    pending: int
    candidates: list[GoldenCandidatePublic]


class GoldenDecisionPublic(BaseModel):
    candidate: GoldenCandidatePublic
    entry: GoldenEntryPublic | None = None


class GoldenApprove(RequestModel):
    """Approve a candidate. `expected_answer` replaces the proposed answer (the reviewer's edit);
    omitted, the reviewer confirms the proposed answer as they read it."""

    expected_answer: str | None = Field(default=None, max_length=20000)
    question: str | None = Field(default=None, min_length=1, max_length=4000)
    note: str | None = Field(default=None, max_length=2000)


class GoldenReject(RequestModel):
    note: str | None = Field(default=None, max_length=2000)


class GoldenRevise(RequestModel):
    """The fields to change (at least one); the rest are copied from the current version."""

    question: str | None = Field(default=None, min_length=1, max_length=4000)
    expected_answer: str | None = Field(default=None, max_length=20000)
    required_doc_ids: list[str] | None = None
    required_chunk_ids: list[str] | None = None
    difficulty: Literal["easy", "standard", "hard"] | None = None
    domain_tags: list[str] | None = None
    note: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _something(self) -> GoldenRevise:
        if all(getattr(self, f) is None for f in type(self).model_fields if f != "note"):
            raise ValueError("a revision changes at least one field")
        return self


class GoldenDeprecate(RequestModel):
    note: str | None = Field(default=None, max_length=2000)


class NominationPublic(BaseModel):
    ran_at: str
    considered: int
    nominated: int
    candidate_ids: list[str]
    already_proposed: int
    not_nominated: dict[str, int]


class CoverageClusterPublic(BaseModel):
    size: int
    representative: str
    examples: list[str]
    nearest_golden_question: str | None
    nearest_similarity: float | None


class CoveragePublic(BaseModel):
    collection: str
    embedder: str
    radius: float
    days: float
    n: int
    """Production queries measured (the recent window, distinct questions)."""
    covered: int
    coverage: float | None
    ci95: list[float] | None
    golden_entries: int
    uncovered_clusters: list[CoverageClusterPublic]


class GoldenGenerate(RequestModel):
    """Generate adversarial candidates at the coverage gaps (they go to the review queue)."""

    max_candidates: int = Field(default=20, ge=1, le=200)
    days: float = Field(default=7.0, gt=0, le=365)
    radius: float | None = Field(default=None, gt=0, le=1)
    """Default: the server's `golden_coverage_radius`."""
    collection: str | None = Field(default=None, pattern=COLLECTION_PATTERN, max_length=64)
    generator: Literal["auto", "templates", "chat"] = "auto"
    """auto: the current pipeline's chat model when it has one, else templates; chat: a 409 without one."""


class GeneratePublic(BaseModel):
    generator: str
    """`chat:<model>` or `templates` (offline)."""
    proposed: int
    already_proposed: int
    candidates: list[GoldenCandidatePublic]
    coverage: CoveragePublic
