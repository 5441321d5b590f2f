"""Every knob of a pipeline version (`PipelineConfig`) and the process settings (`Settings`)."""

from ragloop.config.pipeline import (
    ChunkingConfig,
    ChunkOverride,
    DenseConfig,
    FusionConfig,
    LexicalConfig,
    MMRConfig,
    PipelineConfig,
    RerankConfig,
    RetrievalConfig,
    load_pipeline_config,
)
from ragloop.config.settings import Settings

__all__ = [
    "ChunkOverride",
    "ChunkingConfig",
    "DenseConfig",
    "FusionConfig",
    "LexicalConfig",
    "MMRConfig",
    "PipelineConfig",
    "RerankConfig",
    "RetrievalConfig",
    "Settings",
    "load_pipeline_config",
]
