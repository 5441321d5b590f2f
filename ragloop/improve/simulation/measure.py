"""Held-out measurement: the held-out items through whatever is served now, in-process, never through
the API (a question sent to the service is stored, scored and diagnosed: it would feed the loop).

"What is served now" is read from the service's store as an operator would: the current pipeline
version's config, and, while an experiment runs, the variant the experiment's assigner gives the
item's session (the held-out article or conversation), so held-out users see what traffic users
see. The agent is built over the same collection directory with the same expansion lookup the
service uses, so direct fixes (expansion entries, re-chunked documents) count too.

Every metric comes from the evaluation harness (`ItemRunner` records, `item_metrics`, bootstrap
95% CIs); day-N vs day-0 is the harness's paired test on the same items.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.runner import ItemRunner, WorkerSpec
from ragloop.evaluation.stats import Estimate, PairedTest
from ragloop.evaluation.suites import EvalItem
from ragloop.evaluation.summary import ConfigRun, compare, summarise
from ragloop.store import Store

HEADLINE: tuple[tuple[str, str], ...] = (
    ("e2e_accuracy", "End-to-end accuracy"),
    ("correct_refusal", "Correct refusal (unanswerable refused)"),
    ("false_refusal", "False refusal (answerable refused)"),
    ("faithfulness", "Faithfulness (judged)"),
    ("context_recall", "Context recall (judged)"),
    ("latency_p50", "Latency p50 (ms)"),
)
LOWER_IS_BETTER = frozenset({"false_refusal", "latency_p50"})
JUDGE = "lexical"
"""The harness's default offline judge for faithfulness and context recall (no model calls)."""


@dataclass
class Measurement:
    day: int
    sim_time: str
    versions: dict[str, int]
    """Pipeline version -> held-out items answered by it (two while an experiment runs)."""
    run: ConfigRun
    wall_s: float
    cpu_s: float

    @property
    def metrics(self) -> dict[str, Estimate]:
        return self.run.metrics

    def to_json(self) -> dict[str, Any]:
        return {
            "day": self.day,
            "sim_time": self.sim_time,
            "versions": self.versions,
            "errors": self.run.errors,
            "wall_s": round(self.wall_s, 1),
            "cpu_s": round(self.cpu_s, 1),
            "metrics": {k: self.metrics[k].to_json() for k, _ in HEADLINE if k in self.metrics},
            "failures_by_label": dict(self.run.failure_counts),
        }


@dataclass
class Served:
    """What the store says is served: the current version and, if one runs, the experiment's split."""

    current: str
    configs: dict[str, PipelineConfig] = field(default_factory=dict)
    experiment: tuple[str, float, str, str] | None = None

    def version_for(self, session: str) -> str:
        if self.experiment is None:
            return self.current
        from ragloop.experiments import Variant, make_assigner

        exp_id, split, control, treatment = self.experiment
        variant = make_assigner(None).assign(exp_id, session, split).variant
        return treatment if variant is Variant.TREATMENT else control


def served_now(store: Store) -> Served:
    from ragloop.experiments.registry import running_experiment

    row = store.pipelines.current()
    if row is None:
        raise LookupError("no active pipeline version in the service's store")
    out = Served(row.version_id, {row.version_id: PipelineConfig.model_validate(row.config)})
    exp = running_experiment(store)
    if exp is not None and exp.control_version and exp.treatment_version:
        out.experiment = (exp.experiment_id, exp.traffic_split, exp.control_version, exp.treatment_version)
        for v in (exp.control_version, exp.treatment_version):
            got = store.pipelines.get(v)
            if got is not None:
                out.configs[v] = PipelineConfig.model_validate(got.config)
    return out


def heldout_session(item: EvalItem, suite: str) -> str:
    """The session key a held-out user would have: the article (SQuAD) or the task's conversation."""
    return f"heldout:{suite}:{item.meta.get('title') or item.id}"


def measure(
    store: Store,
    *,
    home: Path,
    collection: str,
    items: Sequence[EvalItem],
    suite: str,
    doc_prefix: str,
    run_dir: Path,
    day: int,
    sim_time: str,
) -> Measurement:
    """Run `items` through what is served now; records go to `run_dir/day-<day>.jsonl`."""
    from ragloop.improve.remediation import serving_expansion
    from ragloop.retrieval.collection import Collection

    t0, c0 = time.perf_counter(), time.process_time()
    served = served_now(store)
    by_version: dict[str, list[EvalItem]] = {}
    for item in items:
        v = served.version_for(heldout_session(item, suite))
        by_version.setdefault(v if v in served.configs else served.current, []).append(item)
    records: list[dict[str, Any]] = []
    for version, group in by_version.items():
        spec = WorkerSpec(
            home=str(home),
            collection=collection,
            config_json=served.configs[version].model_dump(mode="json"),
            doc_prefix=doc_prefix,
            run_dir=str(run_dir),
            mode="agent",
            judge=JUDGE,
            suite=suite,
        )
        lookup = Collection(collection, Settings(home=home))
        expansion = serving_expansion(lookup)
        runner = ItemRunner(spec, expansion=expansion)
        try:
            for item in group:
                rec = runner.run(item)
                rec["pipeline_version"] = version
                records.append(rec)
        finally:
            runner.close()
            getattr(expansion, "close", lambda: None)()
            lookup.close()
    run = ConfigRun(suite, f"day-{day}", {"config": served.configs[served.current].model_dump(mode="json")}, records)
    summarise(run, resamples=1000)
    _write(run_dir / f"day-{day}.jsonl", records)
    return Measurement(
        day,
        sim_time,
        {v: len(g) for v, g in by_version.items()},
        run,
        time.perf_counter() - t0,
        time.process_time() - c0,
    )


def paired(a: Measurement, b: Measurement, metric: str) -> PairedTest | None:
    """b - a on the same held-out items (the harness's paired bootstrap + permutation test)."""
    return compare(a.run, b.run, metric)


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records), encoding="utf-8")
    tmp.replace(path)
