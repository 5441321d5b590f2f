"""The CI gate: a fixed small subset, run offline, checked against committed thresholds.

`ragloop/evaluation/thresholds.yaml` holds both the subset (`subset:` dataset, config, articles
or golden file, sample size and seed) and the `thresholds:` (`metric: {min: x}` or
`{max: x}`). `run_gate` runs the subset from scratch (never resumed: a stale result must not
pass a gate), aggregates the metrics and returns one row per threshold; the CLI exits non-zero
when any row fails or any item errored.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ragloop.config import Settings
from ragloop.evaluation.ablations import load_config
from ragloop.evaluation.metrics.item import item_metrics
from ragloop.evaluation.runner import DEFAULT_JUDGE, run_suite
from ragloop.evaluation.stats import ratio
from ragloop.evaluation.suites import load_suite, sample_items

DEFAULT_THRESHOLDS = Path(__file__).resolve().parent / "thresholds.yaml"


class GateError(ValueError):
    pass


@dataclass(frozen=True)
class GateRow:
    metric: str
    measured: float
    bound: str  # "min" | "max"
    threshold: float
    n: int

    @property
    def ok(self) -> bool:
        if math.isnan(self.measured):
            return False
        return self.measured >= self.threshold - 1e-9 if self.bound == "min" else self.measured <= self.threshold + 1e-9

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "measured": None if math.isnan(self.measured) else round(self.measured, 4),
            self.bound: self.threshold,
            "n": self.n,
            "ok": self.ok,
        }


@dataclass
class GateResult:
    rows: list[GateRow]
    items: int
    errors: int
    seconds: float
    out_dir: Path
    subset: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.errors == 0 and all(r.ok for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "items": self.items,
            "errors": self.errors,
            "seconds": round(self.seconds, 1),
            "subset": self.subset,
            "checks": [r.to_json() for r in self.rows],
            "out_dir": str(self.out_dir),
        }


def load_gate_spec(path: Path) -> dict[str, Any]:
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise GateError(f"cannot read gate thresholds {path}: {exc}") from None
    if (
        not isinstance(spec, dict)
        or not isinstance(spec.get("subset"), dict)
        or not isinstance(spec.get("thresholds"), dict)
    ):
        raise GateError(f"{path}: needs a `subset:` mapping and a `thresholds:` mapping")
    for metric, bound in spec["thresholds"].items():
        if not isinstance(bound, dict) or len(bound) != 1 or next(iter(bound)) not in ("min", "max"):
            raise GateError(f"{path}: threshold {metric!r} must be {{min: x}} or {{max: x}}, got {bound!r}")
    return spec


def check(measured: dict[str, tuple[float, int]], thresholds: dict[str, dict[str, float]]) -> list[GateRow]:
    """One row per threshold; a metric the run did not produce fails (measured NaN)."""
    rows = []
    for metric, bound in thresholds.items():
        kind, value = next(iter(bound.items()))
        m, n = measured.get(metric, (math.nan, 0))
        rows.append(GateRow(metric, m, kind, float(value), n))
    return rows


def aggregate(records: list[dict[str, Any]]) -> dict[str, tuple[float, int]]:
    sums: dict[str, list[tuple[float, float]]] = {}
    for rec in records:
        for k, p in item_metrics(rec).items():
            sums.setdefault(k, []).append(p)
    out = {}
    for k, ps in sums.items():
        n = sum(1 for p in ps if p[1] > 0)
        out[k] = (ratio([p[0] for p in ps], [p[1] for p in ps]), n)
    return out


def run_gate(
    thresholds_path: Path | None = None,
    *,
    settings: Settings | None = None,
    out_dir: Path | None = None,
    workers: int = 2,
    scorers: dict[str, Any] | None = None,
) -> GateResult:
    path = thresholds_path or DEFAULT_THRESHOLDS
    spec = load_gate_spec(path)
    sub = spec["subset"]
    settings = settings or Settings.from_env()
    base = path.parent
    golden = sub.get("golden")
    suite = load_suite(
        str(sub.get("dataset", "squad")),
        golden=(base / golden) if golden else None,
        collection=sub.get("collection"),
        articles=sub.get("articles"),
    )
    config = str(sub.get("config", "full"))
    cfg_ref = str(base / config) if config.endswith((".yaml", ".yml")) else config
    name, cfg = load_config(cfg_ref)
    items = sample_items(suite.items, sample=sub.get("sample"), seed=int(sub.get("seed", 0)), ids=sub.get("ids"))
    out = out_dir or settings.home / "eval" / "gate"
    shutil.rmtree(out, ignore_errors=True)  # a gate never resumes
    t0 = time.perf_counter()
    res = run_suite(
        suite,
        name,
        cfg,
        out,
        settings=settings,
        items=items,
        workers=workers,
        judge=sub.get("judge", DEFAULT_JUDGE),
        seed=int(sub.get("seed", 0)),
        scorers=scorers,
    )
    measured = aggregate(res.records)
    rows = check(measured, spec["thresholds"])
    return GateResult(rows, len(items), res.errors, time.perf_counter() - t0, out, dict(sub))
