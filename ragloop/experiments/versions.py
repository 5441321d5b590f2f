"""Pipeline versions as the experiments see them: immutable configs, candidates derived from a parent,
diffs between two versions, and the one `current` pointer (moved only by activate / rollback, both
audited in the store).

`register_candidate(store, config, created_by=..., parent=...)` is the one way to add a version —
the candidate route, `ragloop pipeline register`, experiments and remediations all call it. A
mapping is read as *overrides* of the parent's config (the current version when no parent is
named); a `PipelineConfig` is taken whole. Unknown keys are refused with their path
(`ConfigError`), never silently dropped. Registering the same config twice returns the stored row:
a version id is the hash of its config, so a version cannot change after it is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ragloop.config import PipelineConfig

if TYPE_CHECKING:
    from ragloop.store import PipelineVersion, Store


class PromotedVia(StrEnum):
    """What moved the `current` pointer to a version (`pipeline_versions.promoted_via`)."""

    EXPERIMENT = "experiment"
    REMEDIATION = "remediation"
    ADMIN = "admin"
    REGRESSION = "regression"
    STARTUP = "startup"


class ConfigError(ValueError):
    """A config (or overrides) that is not a valid `PipelineConfig`; the message names each key."""


def describe_validation(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or 'config'}: {e['msg']}"
        + (" (unknown config key)" if e.get("type") == "extra_forbidden" else "")
        for e in exc.errors()
    )


def apply_overrides(base: PipelineConfig, overrides: Mapping[str, Any]) -> PipelineConfig:
    """`base` with nested `overrides` applied and validated again (ConfigError names bad keys)."""
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"a config must be a mapping, got {type(overrides).__name__}")
    try:
        return base.with_overrides(**{str(k): v for k, v in overrides.items()})
    except ValidationError as exc:
        raise ConfigError(describe_validation(exc)) from None


def full_config(data: Mapping[str, Any]) -> PipelineConfig:
    try:
        return PipelineConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(describe_validation(exc)) from None


def current_config(store: Store) -> tuple[str | None, PipelineConfig]:
    """(the active version id, its config); (None, the defaults) before any activation."""
    row = store.pipelines.current()
    if row is None:
        return None, PipelineConfig()
    return row.version_id, PipelineConfig.model_validate(row.config)


def version_config(store: Store, version_id: str) -> PipelineConfig:
    row = store.pipelines.get(version_id)
    if row is None:
        raise LookupError(f"no pipeline version {version_id!r}")
    return PipelineConfig.model_validate(row.config)


def register_candidate(
    store: Store,
    config: PipelineConfig | Mapping[str, Any],
    *,
    created_by: str,
    parent: str | None = None,
    description: str | None = None,
    audit: bool = True,
) -> PipelineVersion:
    """Store `config` as a candidate version derived from `parent` (default: the current version) and
    audit it. A mapping is overrides of the parent's config. Returns the stored (possibly existing) row."""
    parent_id, base = current_config(store) if parent is None else (parent, version_config(store, parent))
    cfg = config if isinstance(config, PipelineConfig) else apply_overrides(base, config)
    existed = store.pipelines.get(cfg.version_id) is not None
    row = store.pipelines.register_config(
        cfg, description=description, parent_version_id=parent_id, created_by=created_by
    )
    if audit and not existed:
        store.audit.record(
            "pipeline_candidate",
            triggered_by=description or "candidate registered",
            actor=created_by,
            evidence={
                "version": row.version_id,
                "parent": parent_id,
                "changes": diff_versions_of(store, parent_id, cfg),
            },
            pipeline_version_before=parent_id,
            pipeline_version_after=row.version_id,
        )
    return row


@dataclass(frozen=True)
class ConfigChange:
    path: str
    before: Any
    after: Any

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "before": self.before, "after": self.after}


def diff_configs(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[ConfigChange]:
    """Every leaf that differs between two config dicts, as dotted paths (sorted)."""
    changes: list[ConfigChange] = []
    for key in sorted(set(a) | set(b)):
        path = f"{prefix}{key}"
        va, vb = a.get(key), b.get(key)
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            changes += diff_configs(va, vb, f"{path}.")
        elif va != vb:
            changes.append(ConfigChange(path, va, vb))
    return changes


def diff_versions(store: Store, a: str, b: str) -> list[ConfigChange]:
    ca, cb = version_config(store, a), version_config(store, b)
    return diff_configs(ca.model_dump(mode="json", by_alias=True), cb.model_dump(mode="json", by_alias=True))


def diff_versions_of(store: Store, parent: str | None, cfg: PipelineConfig) -> list[dict[str, Any]]:
    base = version_config(store, parent) if parent is not None else PipelineConfig()
    return [
        c.to_json()
        for c in diff_configs(base.model_dump(mode="json", by_alias=True), cfg.model_dump(mode="json", by_alias=True))
    ]
