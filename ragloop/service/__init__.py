"""The HTTP service: a FastAPI app factory over the answer graph, the store and the evaluation tiers.

    from ragloop.service import create_app
    app = create_app()            # RAGLOOP_HOME, RAGLOOP_DATABASE_URL and RAGLOOP_* service settings

`ragloop serve` runs it under uvicorn; `ragloop worker` runs evaluation workers beside it.
"""

from ragloop.service.app import create_app
from ragloop.service.config import ServiceConfig
from ragloop.service.heuristics import HeuristicModel, Tier1Input, compute_features
from ragloop.service.judge import ChatJudge, Judge, JudgeInput, JudgeResult, ScorerJudge, make_judge
from ragloop.service.worker import EvaluationWorker

__all__ = [
    "ChatJudge",
    "EvaluationWorker",
    "HeuristicModel",
    "Judge",
    "JudgeInput",
    "JudgeResult",
    "ScorerJudge",
    "ServiceConfig",
    "Tier1Input",
    "compute_features",
    "create_app",
    "make_judge",
]
