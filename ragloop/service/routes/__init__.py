"""The API's routers, one module per entity."""

from ragloop.service.routes import answers, conversations, documents, health, keys, pipeline, query, review

ROUTERS = (
    health.router,
    query.router,
    answers.router,
    conversations.router,
    documents.router,
    pipeline.router,
    review.router,
    keys.router,
)

__all__ = ["ROUTERS"]
