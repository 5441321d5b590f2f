"""Every knob of a pipeline version (`PipelineConfig`) and the process settings (`Settings`)."""

from ragloop.config.pipeline import (
    AgentConfig,
    BudgetsConfig,
    ChunkingConfig,
    ChunkOverride,
    DenseConfig,
    FusionConfig,
    LexicalConfig,
    MMRConfig,
    PipelineConfig,
    RerankConfig,
    RetrievalConfig,
    ScorersConfig,
    load_pipeline_config,
)
from ragloop.config.settings import Settings

__all__ = [
    "AgentConfig",
    "BudgetsConfig",
    "ChunkOverride",
    "ChunkingConfig",
    "DenseConfig",
    "FusionConfig",
    "LexicalConfig",
    "MMRConfig",
    "PipelineConfig",
    "RerankConfig",
    "RetrievalConfig",
    "ScorersConfig",
    "Settings",
    "load_pipeline_config",
]
