"""The API's routers, one module per entity."""

from ragloop.service.routes import (
    admin,
    answers,
    conversations,
    documents,
    evaluator,
    experiments,
    golden,
    golden_review,
    health,
    improve,
    keys,
    pipeline,
    query,
    regression,
    review,
)

ROUTERS = (
    health.router,
    query.router,
    answers.router,
    conversations.router,
    documents.router,
    pipeline.router,
    experiments.router,
    golden.router,
    golden_review.router,
    regression.router,
    evaluator.router,
    review.router,
    improve.router,
    keys.router,
    admin.router,
)

__all__ = ["ROUTERS"]
