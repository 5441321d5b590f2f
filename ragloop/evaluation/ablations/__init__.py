"""Ablation configs shipped with the package: `baseline` (dense, no reflection), `hybrid`,
`hybrid_rerank`, `full` (everything on) and single-node toggles of `full` (`no_refine`,
`no_critique`, `no_citation_validation`, `no_rewrite`). Each is a partial `PipelineConfig` YAML;
unnamed knobs keep their defaults."""

from __future__ import annotations

from pathlib import Path

from ragloop.config import PipelineConfig, load_pipeline_config

ABLATIONS_DIR = Path(__file__).resolve().parent
MAIN = ("baseline", "hybrid", "hybrid_rerank", "full")
TOGGLES = ("no_refine", "no_critique", "no_citation_validation", "no_rewrite")
ABLATIONS = MAIN + TOGGLES


def ablation_path(name: str) -> Path:
    return ABLATIONS_DIR / f"{name}.yaml"


def load_config(name_or_path: str | Path) -> tuple[str, PipelineConfig]:
    """(name, config) for a shipped ablation name or a YAML path; the name is the config's
    `name` field, or the file stem when that is the default."""
    raw = str(name_or_path)
    path = ablation_path(raw) if raw in ABLATIONS else Path(raw)
    if not path.exists():
        raise ValueError(f"unknown config {raw!r}: not one of {', '.join(ABLATIONS)} and not a file")
    cfg = load_pipeline_config(path)
    name = cfg.name if cfg.name != "default" else path.stem
    return name, cfg
