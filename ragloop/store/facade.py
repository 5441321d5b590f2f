"""`Store`: one object holding a database and every repository, for the app factory and the CLI."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import URL

from ragloop.store.db import Database
from ragloop.store.migrations import upgrade
from ragloop.store.queue import EvaluationQueue
from ragloop.store.repositories import (
    ApiKeys,
    AuditLog,
    Diagnoses,
    DocumentJobs,
    Evaluations,
    Experiments,
    Feedback,
    GoldenCandidates,
    GoldenSet,
    ImprovementActions,
    KnowledgeGaps,
    ModelCalls,
    PipelineVersions,
    QueryLog,
    RegressionRuns,
    ServiceSettings,
)


class Store:
    """Repositories over one `Database`. Build one per app (or test); close it on shutdown."""

    def __init__(self, db: Database, *, queue: EvaluationQueue | None = None) -> None:
        self.db = db
        self.queries = QueryLog(db)
        self.evaluations = Evaluations(db)
        self.feedback = Feedback(db)
        self.golden = GoldenSet(db)
        self.golden_candidates = GoldenCandidates(db, self.golden)
        self.regressions = RegressionRuns(db)
        self.experiments = Experiments(db)
        self.pipelines = PipelineVersions(db)
        self.audit = AuditLog(db)
        self.model_calls = ModelCalls(db)
        self.api_keys = ApiKeys(db)
        self.document_jobs = DocumentJobs(db)
        self.diagnoses = Diagnoses(db)
        self.knowledge_gaps = KnowledgeGaps(db)
        self.improvement_actions = ImprovementActions(db)
        self.settings = ServiceSettings(db)
        self.queue = queue or EvaluationQueue(db)

    @classmethod
    def open(cls, url: str | URL | None = None, *, migrate: bool = True, **engine_kwargs: Any) -> Store:
        """Connect to `url` (default: `RAGLOOP_DATABASE_URL`, else `RAGLOOP_HOME/ragloop.db`), first
        bringing the schema up to date unless `migrate=False`."""
        db = Database.from_url(url, **engine_kwargs)
        if migrate:
            upgrade(db.engine)
        return cls(db)

    def ping(self) -> bool:
        return self.db.ping()

    def close(self) -> None:
        self.db.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
