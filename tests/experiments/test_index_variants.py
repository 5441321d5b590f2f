"""Which index variants may be dropped: the live versions (active, an experiment's arms, an untried
candidate) keep theirs; a refused candidate's goes; the service runs the prune periodically."""

from __future__ import annotations

from ragloop.config import PipelineConfig
from ragloop.experiments.auto import REFUSED
from ragloop.experiments.index_variants import live_configs
from ragloop.store import Store
from tests.service.conftest import SERVICE, build_app


def _cfg(size: int) -> PipelineConfig:
    return PipelineConfig().with_overrides(chunking={"size": size, "overlap": 0})


def test_live_versions_are_the_active_one_an_experiments_arms_and_untried_candidates(store: Store) -> None:
    active = store.pipelines.register_config(_cfg(500))
    store.pipelines.activate(active.version_id, actor="test", reason="start")
    store.pipelines.register_config(_cfg(800), created_by="remediation:chunking_buffer")
    refused = store.pipelines.register_config(_cfg(1300), created_by="remediation:chunking_buffer")
    store.audit.record(
        REFUSED, triggered_by="golden-set check failed", evidence={}, pipeline_version_after=refused.version_id
    )
    assert sorted(c.chunking.size for c in live_configs(store)) == [500, 800]
    arm = store.pipelines.register_config(_cfg(1000), created_by="a person")  # tried: it has an experiment
    store.experiments.create(
        "bigger chunks",
        control_config=_cfg(500).model_dump(mode="json"),
        treatment_config=_cfg(1000).model_dump(mode="json"),
        primary_metric="tier1_score",
        control_version=active.version_id,
        treatment_version=arm.version_id,
    )
    assert sorted(c.chunking.size for c in live_configs(store)) == [500, 800, 1000]


def test_the_service_prunes_variants_periodically(store: Store) -> None:
    assert "index-variant-prune" in build_app(store).state.service.loops.names
    off = build_app(store, service_config=SERVICE.with_(variant_prune_interval_s=0.0))
    assert "index-variant-prune" not in off.state.service.loops.names
