"""Typed repositories, one per entity. Every method is one transaction, or joins the caller's
(`Database.transaction()`), and returns rows detached from their session: plain data to read.

Rules the database enforces, and the methods here respect:
- the audit log is insert-only (a later measurement is a new row that `refers_to` the change);
- golden-set entries change by insert + deprecate (`revise_golden_entry`), never in place;
- exactly one pipeline version is active; `activate` and `rollback` switch it atomically and audit it;
- API keys are stored as prefix + sha256; the plain key exists only in `create_api_key`'s return value.

One module per aggregate; this package re-exports every public name so callers import from
`ragloop.store.repositories` (or `ragloop.store`) without knowing the layout.
"""

from ragloop.store.repositories._base import METRICS, NotFoundError, StoreConflictError
from ragloop.store.repositories.api_keys import (
    API_KEY_PREFIX,
    ApiKeyRecord,
    ApiKeys,
    IssuedApiKey,
    api_key_id,
    hash_api_key,
)
from ragloop.store.repositories.audit import AuditLog
from ragloop.store.repositories.diagnoses import Candidate, Diagnoses
from ragloop.store.repositories.document_jobs import DocumentJobs
from ragloop.store.repositories.evaluations import Evaluations
from ragloop.store.repositories.experiments import Experiments, RegressionRuns
from ragloop.store.repositories.feedback import Feedback, feedback_weight
from ragloop.store.repositories.golden import GoldenSet, NewEntry
from ragloop.store.repositories.golden_candidates import GoldenCandidates, NominationFacts
from ragloop.store.repositories.golden_candidates import Proposal as GoldenProposal
from ragloop.store.repositories.improvement_actions import ImprovementActions, Proposal
from ragloop.store.repositories.knowledge_gaps import KnowledgeGaps
from ragloop.store.repositories.model_calls import ModelCalls, ModelUsage
from ragloop.store.repositories.pipelines import PipelineVersions
from ragloop.store.repositories.queries import QueryLog, SessionSummary, question_hash
from ragloop.store.repositories.settings import ServiceSettings

__all__ = [
    "API_KEY_PREFIX",
    "METRICS",
    "ApiKeyRecord",
    "ApiKeys",
    "AuditLog",
    "Candidate",
    "Diagnoses",
    "DocumentJobs",
    "Evaluations",
    "Experiments",
    "Feedback",
    "GoldenCandidates",
    "GoldenProposal",
    "GoldenSet",
    "ImprovementActions",
    "IssuedApiKey",
    "KnowledgeGaps",
    "ModelCalls",
    "ModelUsage",
    "NewEntry",
    "NominationFacts",
    "NotFoundError",
    "PipelineVersions",
    "Proposal",
    "QueryLog",
    "RegressionRuns",
    "ServiceSettings",
    "SessionSummary",
    "StoreConflictError",
    "api_key_id",
    "feedback_weight",
    "hash_api_key",
    "question_hash",
]
