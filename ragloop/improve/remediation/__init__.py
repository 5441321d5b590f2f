"""Remediations: typed actions with evidence, expected delta, apply and revert, by `ActionKind`.

`REMEDIATIONS` is the registry table (kind -> class), so a new kind is one row, never a branch.
The rows themselves are proposed by the diagnosis pass (`ragloop.improve.proposals`); each class
reads the payload it writes (extra keys ignored).
"""

from __future__ import annotations

from collections.abc import Mapping

from ragloop.improve.remediation.answer_check import AnswerCheckAction
from ragloop.improve.remediation.base import (
    ActionSpec,
    AppliedChange,
    AuditNote,
    Effect,
    GroupMeasurement,
    QueryGroup,
    Remediation,
    RemediationContext,
    RemediationError,
    RemediationSettings,
    SupersededError,
    check_serving,
)
from ragloop.improve.remediation.chunking import ChunkingBufferAction
from ragloop.improve.remediation.expansion import ExpansionCacheAction, ExpansionPayload
from ragloop.improve.remediation.expansion_cache import (
    ExpansionBackend,
    ExpansionCache,
    ExpansionEntry,
    RedisExpansionBackend,
    RegistryExpansionBackend,
    make_expansion_backend,
    serving_expansion,
)
from ragloop.improve.remediation.gap import KnowledgeGapAction
from ragloop.improve.remediation.prompts import PromptCandidateAction
from ragloop.improve.remediation.ranking import RankingBufferAction
from ragloop.improve.remediation.rechunk import RechunkAction
from ragloop.improve.remediation.thresholds import ThresholdRecalibrationAction
from ragloop.improve.remediation.tier1 import Tier1RecalibrationAction
from ragloop.improve.types import ActionKind

REMEDIATIONS: Mapping[ActionKind, type[Remediation]] = {
    cls.kind: cls
    for cls in (
        ExpansionCacheAction,
        RechunkAction,
        KnowledgeGapAction,
        RankingBufferAction,
        ChunkingBufferAction,
        ThresholdRecalibrationAction,
        AnswerCheckAction,
        PromptCandidateAction,
        Tier1RecalibrationAction,
    )
}


class UnsupportedAction(RemediationError):
    """An action kind no remediation implements yet."""


def make_remediation(spec: ActionSpec) -> Remediation:
    cls = REMEDIATIONS.get(spec.kind)
    if cls is None:
        raise UnsupportedAction(f"no remediation implements {spec.kind.value!r} yet")
    return cls(spec)


__all__ = [
    "REMEDIATIONS",
    "ActionSpec",
    "AnswerCheckAction",
    "AppliedChange",
    "AuditNote",
    "ChunkingBufferAction",
    "Effect",
    "ExpansionBackend",
    "ExpansionCache",
    "ExpansionCacheAction",
    "ExpansionEntry",
    "ExpansionPayload",
    "GroupMeasurement",
    "KnowledgeGapAction",
    "PromptCandidateAction",
    "QueryGroup",
    "RankingBufferAction",
    "RechunkAction",
    "RedisExpansionBackend",
    "RegistryExpansionBackend",
    "Remediation",
    "RemediationContext",
    "RemediationError",
    "RemediationSettings",
    "SupersededError",
    "ThresholdRecalibrationAction",
    "Tier1RecalibrationAction",
    "UnsupportedAction",
    "check_serving",
    "make_expansion_backend",
    "make_remediation",
    "serving_expansion",
]
