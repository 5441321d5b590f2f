"""`ServiceConfig`: the service's knobs (limits, evaluation routing, worker), read from the environment.

These are about operating the service, not about answers, so they are not part of the pipeline
version id. Every field has an environment variable (`RAGLOOP_` + the upper-case field name for
most of them); `ServiceConfig.from_env()` reads them and names the variable in its error. The
tier-routing fields reach `ragloop.improve` as one `RoutingConfig` (`ServiceConfig.routing`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ragloop.experiments.auto import AutoExperimentSettings
from ragloop.improve.routing import RoutingConfig

_ROUTING = RoutingConfig()

UPLOAD_EXTENSIONS: tuple[str, ...] = (".md", ".markdown", ".txt", ".rst", ".html", ".htm", ".pdf", ".jsonl")


@dataclass(frozen=True)
class ServiceConfig:
    # what is served
    collection: str = "default"
    """The collection `/v1/query` and the `ragloop` chat model answer from when none is named."""
    instance: str | None = None
    """This instance's name as the owner of its document jobs (their files live in its `RAGLOOP_HOME`);
    None: host name + `RAGLOOP_HOME`. Set a stable one where the host name changes on restart
    (containers), so a restarted instance takes up the jobs it left unfinished."""

    # limits
    max_request_bytes: int = 1024 * 1024
    """Largest request body outside uploads (413 above it)."""
    max_upload_bytes: int = 10 * 1024 * 1024
    """Largest uploaded file."""
    max_upload_files: int = 20
    upload_extensions: tuple[str, ...] = UPLOAD_EXTENSIONS
    rate_limit_per_minute: int = 120
    """Per-key limit for keys that do not carry their own."""
    answer_write_timeout_s: float = 10.0
    """How long storing an answer (with its tier-1 job) may take before the request gets a 503 instead
    of the answer: an answer id is only handed out once it is stored. Longer than a competing SQLite
    writer's usual lock hold (a few seconds), shorter than a client's patience."""
    max_concurrent_answers: int = field(default_factory=lambda: max(2, 2 * (os.cpu_count() or 1)))
    """Answer-graph runs at once in this process; more requests wait their turn. The graph is CPU-bound
    and writes its memory to SQLite: past a few per core, more at once only adds lock waits."""

    # HTTP
    cors_origins: tuple[str, ...] = ()
    """Allowed browser origins; empty (the default) means CORS is off."""
    auth_failures_per_minute: int = 20
    """Refused API keys (malformed, unknown, wrong secret, revoked) allowed per client address per
    minute, refilled evenly; past them a request from that address that presents a key gets 429
    with `Retry-After` before its key is looked up. 0 turns the limit off."""

    # evaluation
    inprocess_worker: bool = True
    """Run an evaluation worker inside the server (the embedded default); off when `ragloop worker`
    processes do the work."""
    judge: str | None = "embedding:minilm"
    """Tier 2: `chat:<chat model>` (one structured judging prompt per answer) or a scorer name
    (`llm:<chat model>`, `embedding:minilm`, `lexical`) running the RAGAS formulas; None: no judge
    in this process (tier-2 jobs wait for a worker that has one)."""
    heuristic_support: str | None = "embedding:minilm"
    """Scorer for tier 1's support check of the least-supported claim; None skips the check."""
    # routing between the tiers: `ragloop.improve.routing.RoutingConfig` documents each one
    tier2_sample_rate: float = _ROUTING.tier2_sample_rate
    tier2_threshold: float = _ROUTING.tier2_threshold
    tier3_sample_rate: float = _ROUTING.tier3_sample_rate
    tier3_disagreement: float = _ROUTING.tier3_disagreement
    tier3_disagreement_share: float = _ROUTING.tier3_disagreement_share
    tier3_disagreement_daily_max: int = _ROUTING.tier3_disagreement_daily_max
    tier3_disagreement_daily_min: int = _ROUTING.tier3_disagreement_daily_min
    diagnose: bool = True
    """Workers also diagnose failed answers (the `diagnosis` tier, `ragloop.improve.engine`; its own knobs
    are `RAGLOOP_DIAGNOSIS_*`); off leaves diagnosis to `ragloop improve run` or other workers."""
    remediate: bool = True
    """Workers also run the remediation pass (`ragloop.improve.remediate`: audit what is due, schedule and
    apply what is proposed, within its caps) after diagnoses and at each sweep; off leaves it to
    `ragloop improve run`."""
    answer_check: str | None = None
    """A reader the remediation pass may turn on as the answer check (`ragloop.improve.remediation.answer_check`),
    e.g. `llm:local:qwen2.5-coder-1.5b`: fitted from labelled traffic, it goes current only with a measured
    gain. None: never proposed (a served check costs a model call per answer)."""
    lease_seconds: float = 60.0
    poll_interval_s: float = 0.5
    job_max_attempts: int = 5

    # experiments (ragloop.experiments)
    redis_url: str | None = None
    """`RAGLOOP_REDIS_URL`: experiment assignments are cached in Redis (a fleet agrees without
    recomputing); unset, every server hashes the session id itself (the same answer)."""
    experiment_aggregate_interval_s: float = 300.0
    """How often running experiments are aggregated (guardrails, promotion); 0 turns it off."""
    promotion_window: str = ""
    """UTC hours in which an experiment may promote its treatment, "HH-HH" (e.g. "2-5"); empty: any time."""
    auto_experiment_interval_s: float = 300.0
    """How often the auto-experiment step runs (`ragloop.experiments.auto`: a machine-made candidate passes
    the golden check, then gets an experiment with the defaults below); 0 turns it off."""
    experiment_traffic_split: float = 0.05
    """Treatment share of the experiments the auto-experiment step starts, in (0, 0.5]."""
    experiment_min_sample_size: int = 500
    """Answers per arm before such an experiment may decide."""
    experiment_min_duration_s: float = 86400.0
    """Seconds (on the loop's clock) before such an experiment may promote."""
    experiment_min_effect: float = 0.02
    experiment_max_duration_s: float = 7 * 86400.0
    """An auto-started experiment still undecided after this long is stopped (inconclusive); 0: never."""
    experiment_primary_metric: str = "tier1_score"
    experiment_guardrail_metrics: tuple[str, ...] = ("faithfulness", "latency_p99")
    auto_experiment_requires_approval: bool = False
    """A machine-made candidate waits for a human approval (`ragloop pipeline approve`) before its golden
    check and experiment; off by default (see `ragloop.experiments.auto` for why)."""
    auto_experiment_off_policy: bool = True
    """A τL raise whose gain the refit measured on labelled traffic goes current on the golden check, in
    the promotion window, without a live experiment (`ragloop.experiments.off_policy` says why)."""
    activation_audit_interval_s: float = 3600.0
    """How often (on the loop's clock) switches of the current version whose window has passed get their
    actual delta measured (`ragloop.experiments.activation_audit`); 0 turns it off."""
    activation_audit_window_s: float = 86400.0
    """The window before and after a switch whose answers that measurement compares."""
    variant_prune_interval_s: float = 3600.0
    """How often the index variants no live version is served from are dropped
    (`ragloop.experiments.index_variants`); 0 turns it off."""
    regression_interval_s: float = 0.0
    """The scheduled golden-set regression run (86400 for nightly); 0 (the default) turns it off."""
    regression_webhook_url: str | None = None
    """The default of where a regression alert is POSTed (JSON, retried) beside its log line; an admin's
    stored setting (`PUT /v1/regression/webhook`, `ragloop regress webhook set`) overrides it; unset
    and none stored: log only (`ragloop.experiments.alerts`)."""
    rubric_check_interval_s: float = 30 * 86400.0
    """The evaluator-drift rubric check (tier-2 scores vs implicit satisfaction, `ragloop drift check`):
    monthly by default, read on the loop's clock; 0 turns it off."""
    golden_nomination_check_s: float = 0.0
    """How often the server checks whether the nightly golden-set nomination is due (it runs at most
    once per UTC day of the loop's clock, at or after `golden_nomination_hour`); 0 (the default) turns
    it off."""
    golden_nomination_hour: int = 2
    golden_target_mix: str = ""
    """The golden set's target difficulty mix, "easy=0.3,standard=0.5,hard=0.2" (empty: that default)."""
    golden_coverage_radius: float = 0.5
    """Cosine similarity within which a production query counts as covered by a golden question (0.5:
    chosen for MiniLM on SQuAD 2.0, `ragloop.experiments.golden_coverage.DEFAULT_RADIUS`)."""

    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> ServiceConfig:
        env = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "extra":
                continue
            var = f"RAGLOOP_{f.name.upper()}"
            raw = env.get(var)
            if raw is None:
                continue
            values[f.name] = _parse(var, raw, getattr(cls(), f.name))
        values.update(overrides)
        return cls(**values)

    def with_(self, **changes: Any) -> ServiceConfig:
        return replace(self, **changes)

    @property
    def auto_experiments(self) -> AutoExperimentSettings:
        """The experiment every machine-made candidate gets, for `ragloop.experiments.auto`."""
        return AutoExperimentSettings(
            traffic_split=self.experiment_traffic_split,
            min_sample_size=self.experiment_min_sample_size,
            min_duration_s=self.experiment_min_duration_s,
            primary_metric=self.experiment_primary_metric,
            min_effect=self.experiment_min_effect,
            max_duration_s=self.experiment_max_duration_s,
            guardrail_metrics=self.experiment_guardrail_metrics,
            require_approval=self.auto_experiment_requires_approval,
            off_policy=self.auto_experiment_off_policy,
        )

    @property
    def routing(self) -> RoutingConfig:
        """The tier-routing knobs, for `ragloop.improve` (which does not read the service's config)."""
        return RoutingConfig(**{f.name: getattr(self, f.name) for f in fields(RoutingConfig)})


def _parse(var: str, raw: str, default: Any) -> Any:
    text = raw.strip()
    try:
        if isinstance(default, bool):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true/false")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
        if isinstance(default, tuple):
            return tuple(p.strip() for p in text.split(",") if p.strip())
        if default is None or isinstance(default, str):
            return None if text.lower() in ("", "none", "off") else text
    except ValueError as exc:
        raise ValueError(f"{var}={raw!r}: {exc}") from None
    return text
