"""The HTTP service: a FastAPI app factory over the answer graph, the store and the evaluation tiers.

    from ragloop.service import create_app
    app = create_app()            # RAGLOOP_HOME, RAGLOOP_DATABASE_URL and RAGLOOP_* service settings

`ragloop serve` runs it under uvicorn; `ragloop worker` runs evaluation workers beside it. The
evaluation itself (tiers, judge, routing, review intake) is `ragloop.improve`; the service wires
routes and workers to it.
"""

from ragloop.service.app import create_app
from ragloop.service.config import ServiceConfig
from ragloop.service.worker import EvaluationWorker

__all__ = [
    "EvaluationWorker",
    "ServiceConfig",
    "create_app",
]
