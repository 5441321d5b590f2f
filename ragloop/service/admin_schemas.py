"""Response bodies of the admin console's read routes (`routes/admin.py`): the audit-log timeline,
the evaluation list and the tiers' agreement, an experiment's confidence sequence.
Read-only views of existing tables; every rate carries its n and 95% interval."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ragloop.service.inputs import display_text

Shown = Annotated[str, AfterValidator(display_text)]
"""Text that may come from a user, a document or a model: bidi controls removed (as in `schemas`)."""


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class AuditEntryPublic(_Out):
    log_id: str
    action_type: str
    triggered_by: str
    actor: str
    evidence: dict[str, Any]
    pipeline_version_before: str | None = None
    pipeline_version_after: str | None = None
    expected_delta: dict[str, Any] | None = None
    actual_delta: dict[str, Any] | None = None
    refers_to: str | None = Field(default=None, description="The change this entry measured or followed up.")
    created_at: datetime
    action_id: str | None = Field(default=None, description="The improvement action it belongs to, if any.")
    action_status: str | None = Field(default=None, description="That action's status now.")
    revertible: bool = Field(default=False, description="POST /v1/improvements/{action_id}/revert would undo it.")


class AuditPagePublic(BaseModel):
    entries: list[AuditEntryPublic]
    total: int = Field(description="Entries matching the filter, all pages together.")
    limit: int
    offset: int
    action_types: dict[str, int] = Field(description="Entries per action type in the whole log.")


class EvaluationRowPublic(BaseModel):
    eval_id: str
    answer_id: str
    evaluation_tier: str
    status: str
    overall: float | None = Field(description="tier 1's score, else the mean of the answer metrics given.")
    scores: dict[str, Any]
    failure_mode: str | None = None
    evaluator_model: str | None = None
    error: str | None = None
    evaluated_at: datetime
    question: Shown
    answer: Shown
    experiment_id: str | None = None
    variant: str | None = None
    pipeline_version: str


class EvaluationsPagePublic(BaseModel):
    evaluations: list[EvaluationRowPublic]
    total: int
    limit: int
    offset: int


class EstimatePublic(BaseModel):
    value: float | None
    lo: float | None
    hi: float | None
    n: int


class AgreementPairPublic(BaseModel):
    a: str
    b: str
    n: int = Field(description="Answers both tiers scored.")
    agreement: EstimatePublic = Field(description="Share with the same pass/fail verdict; Wilson 95% interval.")
    kappa: EstimatePublic = Field(description="Cohen's kappa of the pass/fail verdicts; bootstrap 95% interval.")
    mean_abs_difference: EstimatePublic = Field(description="Mean |score a − score b|; t 95% interval.")


class AgreementPublic(BaseModel):
    threshold: float = Field(description="A score at or above it passes.")
    answers: int = Field(description="Answers with a tier-2 or human evaluation considered.")
    pairs: list[AgreementPairPublic]


class SequencePointPublic(_Out):
    at: datetime
    n_control: int
    n_treatment: int
    difference: float
    always_valid_lo: float | None = Field(description="None before burn-in (or unbounded).")
    always_valid_hi: float | None
    welch_lo: float | None
    welch_hi: float | None
    burned_in: bool


class ConfidenceSequencePublic(_Out):
    experiment_id: str
    metric: str
    direction: str
    alpha: float
    min_effect: float
    min_sample_size: int
    burn_in: int
    points: list[SequencePointPublic]
