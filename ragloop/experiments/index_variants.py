"""Which index variants may go: a variant (`ragloop.retrieval.variants`) is a second index of the whole
corpus, kept for a version whose chunking differs from the collection's. It is needed while that
version serves or may soon: the active version, both arms of a running or promoting experiment, and
a candidate not yet tried (its golden check and experiment will read it). The rest are dropped by
the service's periodic task (`RAGLOOP_VARIANT_PRUNE_INTERVAL_S`); dropping is never unsafe, only a
cost, because a variant a version needs again (a rollback, say) is rebuilt on its first read.
"""

from __future__ import annotations

from ragloop.config import PipelineConfig, Settings
from ragloop.experiments.assignment import ExperimentStatus
from ragloop.experiments.auto import tried
from ragloop.retrieval.variants import prune_variants
from ragloop.store import Store

KEEP_EXPERIMENTS = (ExperimentStatus.RUNNING, ExperimentStatus.PROMOTING)


def live_configs(store: Store) -> list[PipelineConfig]:
    """The versions that serve or may soon (see the module docstring)."""
    ids: set[str] = set()
    current = store.pipelines.current()
    if current is not None:
        ids.add(current.version_id)
    for status in KEEP_EXPERIMENTS:
        for exp in store.experiments.list_experiments(status=status):
            ids.update(v for v in (exp.control_version, exp.treatment_version) if v)
    ids.update(
        v.version_id for v in store.pipelines.list_versions(status="candidate") if not tried(store, v.version_id)
    )
    rows = [store.pipelines.get(v) for v in sorted(ids)]
    return [PipelineConfig.model_validate(r.config) for r in rows if r is not None]


def prune_index_variants(store: Store, settings: Settings, collection: str) -> list[str]:
    """Drop `collection`'s variants no live version is served from; returns their names."""
    return prune_variants(settings, collection, live_configs(store))
