"""Request and response bodies of the experiment, candidate and golden-set routes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from ragloop.experiments.registry import ExperimentSpec
from ragloop.service.schemas import RequestModel


class CandidateCreate(RequestModel):
    """Exactly one of `overrides` (applied to `parent`, default the current version) or `config` (whole)."""

    overrides: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    parent: str | None = None
    description: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _one(self) -> CandidateCreate:
        if (self.overrides is None) == (self.config is None):
            raise ValueError("give exactly one of `overrides` (a partial config) or `config` (a full one)")
        return self


class ConfigChangePublic(BaseModel):
    path: str
    before: Any
    after: Any


class VersionDiffPublic(BaseModel):
    a: str
    b: str
    changes: list[ConfigChangePublic]


class ExperimentPublic(BaseModel):
    experiment_id: str
    name: str
    status: str
    status_reason: str | None
    control_version: str | None
    treatment_version: str | None
    traffic_split: float
    min_sample_size: int
    min_duration_s: float
    min_effect: float
    primary_metric: str
    guardrail_metrics: list[str]
    recommendation: str | None
    created_by: str | None
    started_at: str | None
    ended_at: str | None
    promoted_at: str | None


class ExperimentCreate(ExperimentSpec, RequestModel):
    """`ExperimentSpec` (the experiments layer's own validation) held to the API's input policy."""


class ExperimentAction(RequestModel):
    reason: str = Field(default="manual", max_length=500)


class GoldenEntryCreate(RequestModel):
    question: str = Field(min_length=1, max_length=4000)
    expected_answer: str = Field(default="", max_length=20000)
    required_doc_ids: list[str] = Field(default_factory=list)
    required_chunk_ids: list[str] = Field(default_factory=list)
    difficulty: Literal["easy", "standard", "medium", "hard"] = "standard"
    domain_tags: list[str] = Field(default_factory=list)
    should_refuse: bool = False
