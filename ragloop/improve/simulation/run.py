"""One simulation arm: a data set served by the real service on a compressed clock for N simulated
days of replayed traffic, measured on its held-out part before day 1 and after every day.

The arm's timeline, on one clock (`RAGLOOP_CLOCK=scaled:<epoch>:<anchor>:<factor>`, read by the
server, the workers and this driver alike): day d is [epoch + (d-1) days, epoch + d days). Its
traffic is replayed from the day's start; the simulated reviewer then works the tier-3 queue; the
held-out measurement is taken once the day is over (by the clock). A day whose work overruns its
length is recorded as late (`late_s`), never shortened: windows stay the clock's.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ragloop.config import PipelineConfig, Settings
from ragloop.config.clock import Clock, ScaledClock
from ragloop.evaluation.suites import EvalItem
from ragloop.improve.simulation.data import SimData, day_sessions, load_mtrag_sim, load_squad_sim, sample_heldout
from ragloop.improve.simulation.measure import Measurement, measure
from ragloop.improve.simulation.service import ServedSystem, ServiceError, ServiceSpec, issue_keys
from ragloop.improve.simulation.users import UserModel, Users
from ragloop.store import Store

EPOCH = datetime(2026, 3, 2, tzinfo=UTC)
"""Day 1 starts Monday 2026-03-02 00:00 UTC on the simulated clock."""
COLLECTION = "sim"
_MIGRATIONS = threading.Lock()


def start_config(start: str) -> PipelineConfig:
    """`defaults`: today's `PipelineConfig()`; `degraded`: dense-only retrieval, top-k 2, chunk size 200."""
    if start == "defaults":
        return PipelineConfig()
    if start == "degraded":
        return PipelineConfig.model_validate(
            {"chunking": {"size": 200, "overlap": 25}, "retrieval": {"mode": "dense", "k": 2}}
        )
    raise ValueError(f"--start must be defaults or degraded, not {start!r}")


@dataclass
class ArmConfig:
    label: str
    dataset: str = "squad"
    data_path: Path | None = None
    start: str = "defaults"
    days: int = 7
    day_minutes: float = 2.0
    traffic_per_day: int | None = None
    """Graded turns a day (None: the traffic part once over the week)."""
    heldout: int | None = None
    """Held-out items measured (a fixed sample; None: all)."""
    heldout_avoid: tuple[int, ...] = ()
    """Leave out the items of the fixed samples of these sizes earlier runs measured (`data.sample_heldout`)."""
    paragraphs_per_article: int | None = None
    users: UserModel = field(default_factory=UserModel)
    golden: int = 40
    """Traffic items the operator curates into the golden set before day 1 (never held-out ones)."""
    workers: int = 1
    answer_check: str | None = None
    """The reader the deployment lets the loop turn on as the answer check (`RAGLOOP_ANSWER_CHECK`)."""
    database_url: str | None = None
    redis_url: str | None = None
    seed: int = 0

    def service_env(self) -> dict[str, str]:
        """Windows the deployment configures, on the simulated clock: aggregation hourly, the golden
        regression nightly, promotions in the 01-05 maintenance window."""
        check = {"RAGLOOP_ANSWER_CHECK": self.answer_check} if self.answer_check else {}
        return check | {
            "RAGLOOP_EXPERIMENT_AGGREGATE_INTERVAL_S": "3600",
            "RAGLOOP_REGRESSION_INTERVAL_S": "86400",
            "RAGLOOP_RATE_LIMIT_PER_MINUTE": "100000",
            "RAGLOOP_MAX_CONCURRENT_ANSWERS": "2",
            # the experiments the auto-experiment step gives machine-made candidates (ragloop.experiments.auto),
            # sized for a few dozen answers a simulated day: half the sessions, decided on what users
            # say (tier 1 agrees with labels too weakly to decide on), after at least one simulated day
            "RAGLOOP_AUTO_EXPERIMENT_INTERVAL_S": "3600",
            "RAGLOOP_EXPERIMENT_TRAFFIC_SPLIT": "0.5",
            "RAGLOOP_EXPERIMENT_MIN_SAMPLE_SIZE": "20",
            "RAGLOOP_EXPERIMENT_MIN_DURATION_S": "86400",
            "RAGLOOP_EXPERIMENT_MAX_DURATION_S": "259200",
            "RAGLOOP_EXPERIMENT_PRIMARY_METRIC": "user_rating",
        }


@dataclass
class ArmResult:
    config: ArmConfig
    split: str
    measurements: list[Measurement] = field(default_factory=list)
    days: list[dict[str, Any]] = field(default_factory=list)
    audit: list[dict[str, Any]] = field(default_factory=list)
    versions: list[dict[str, Any]] = field(default_factory=list)
    experiments: list[dict[str, Any]] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)
    users: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def load_data(cfg: ArmConfig) -> SimData:
    if cfg.dataset == "squad":
        return load_squad_sim(cfg.data_path, paragraphs_per_article=cfg.paragraphs_per_article)
    if cfg.dataset == "mtrag":
        return load_mtrag_sim(cfg.data_path)
    raise ValueError(f"unknown data set {cfg.dataset!r} (squad | mtrag)")


def seed_cache(home: Path, prepared: Path, prefix: str) -> None:
    """Start `home`'s embedding cache from a ready home of another chunking of the same corpus (by
    content hash, so every passage sentence's vector carries over). Only into a home that has no
    cache yet: a half-built home keeps its own, whose SQLite write-ahead log belongs to its own
    file (copying another file over it corrupted the cache: "database disk image is malformed")."""
    if (home / "cache").exists():
        return
    for other in sorted(prepared.glob(f"{prefix}*/.ready")):
        shutil.copytree(other.parent / "cache", home / "cache")
        return


def prepare_home(data: SimData, config: PipelineConfig, base: Path) -> Path:
    """The collection ingested once per (data set, chunking) under `base`; arms copy it."""
    key = f"{data.name}-{data.dataset.name}-c{config.chunking.size}-{config.chunking.overlap}"
    home = base / "prepared" / key
    if not (home / ".ready").exists():
        from ragloop.retrieval.collection import Collection

        # a half-built home from an interrupted run: its collection goes, its embedding cache (content
        # addressed, so never wrong) stays
        shutil.rmtree(home / "collections", ignore_errors=True)
        seed_cache(home, base / "prepared", f"{data.name}-{data.dataset.name}-c")
        settings = Settings(home=home)
        corpus = home / "corpus"
        data.dataset.write_corpus(corpus)
        Collection(COLLECTION, settings).ingest([corpus], config)
        (home / ".ready").write_text("ok")
    return home


def run_arm(cfg: ArmConfig, work: Path, *, log: Any = print) -> ArmResult:
    t_wall, t_cpu = time.perf_counter(), _cpu()
    data = load_data(cfg)
    config = start_config(cfg.start)
    arm_dir = work / cfg.label
    shutil.rmtree(arm_dir, ignore_errors=True)
    home = arm_dir / "home"
    shutil.copytree(prepare_home(data, config, work), home, ignore=shutil.ignore_patterns("corpus"))
    heldout = sample_heldout(data.heldout, cfg.heldout, cfg.seed, avoid=cfg.heldout_avoid)
    earlier = " and ".join(f"{n}-item" for n in cfg.heldout_avoid)
    avoided = f" (none of the earlier {earlier} samples)" if cfg.heldout_avoid else ""
    result = ArmResult(cfg, data.split_note() + f"; measured: {len(heldout)} held-out items{avoided}")
    url = cfg.database_url or f"sqlite:///{home / 'ragloop.db'}"
    with _MIGRATIONS:  # Alembic's migration context is process-global: one arm at a time
        store = Store.open(url)
    try:
        row = store.pipelines.register_config(config)
        store.pipelines.activate(row.version_id, actor="simulation", reason=f"start: {cfg.start}")
        user_key, admin_key = issue_keys(store)
        log(f"[{cfg.label}] day 0: measuring {len(heldout)} held-out items")
        _measure(result, store, home, data, heldout, arm_dir, 0, log, None)
        factor = 86400.0 / (cfg.day_minutes * 60.0)
        clock = ScaledClock(EPOCH, time.time() + 20.0, factor)  # day 1 starts once the service is up
        spec = ServiceSpec(
            home, COLLECTION, clock.spec(), cfg.database_url, cfg.redis_url, cfg.workers, cfg.service_env()
        )
        users = Users(cfg.users, cfg.seed, data.doc_prefix)
        schedule = day_sessions(data.traffic, cfg.days, cfg.traffic_per_day, cfg.seed)
        asked: dict[str, tuple[EvalItem, dict[str, Any]]] = {}
        with ServedSystem(spec, user_key=user_key, admin_key=admin_key, log_dir=arm_dir / "logs") as svc:
            result.cost["golden_entries"] = _seed_golden(svc, data, cfg.golden, cfg.seed)
            for day in range(1, cfg.days + 1):
                start = EPOCH + timedelta(days=day - 1)
                _wait_until(clock, start)
                stats = _replay_day(svc, schedule[day - 1], users, cfg, asked)
                stats["day"] = day
                stats["traffic_done_at"] = clock.now().isoformat(timespec="seconds")
                _wait_until(clock, start + timedelta(days=1))
                stats["late_s"] = round(max(0.0, (clock.now() - start - timedelta(days=1)).total_seconds()), 1)
                if not svc.alive():
                    raise ServiceError(f"a served process died on day {day} (logs: {arm_dir / 'logs'})")
                result.days.append(stats)
                log(f"[{cfg.label}] day {day}: {stats['turns']} turns, {stats['feedback']} ratings; measuring")
                _measure(result, store, home, data, heldout, arm_dir, day, log, clock)
        result.users = dict(users.counts)
        _collect(result, store)
    finally:
        store.close()
    result.cost.update(wall_s=round(time.perf_counter() - t_wall, 1), cpu_s=round(_cpu() - t_cpu, 1))
    (arm_dir / "arm.json").write_text(json.dumps(arm_json(result), indent=1, default=str))
    return result


def _measure(
    result: ArmResult,
    store: Store,
    home: Path,
    data: SimData,
    items: list[EvalItem],
    arm_dir: Path,
    day: int,
    log: Any,
    clock: Clock | None,
) -> None:
    m = measure(
        store,
        home=home,
        collection=COLLECTION,
        items=items,
        suite=data.name,
        doc_prefix=data.doc_prefix,
        run_dir=arm_dir / "heldout",
        day=day,
        sim_time=(clock.now() if clock is not None else EPOCH).isoformat(timespec="seconds"),
    )
    result.measurements.append(m)
    acc = m.metrics.get("e2e_accuracy")
    log(f"[{result.config.label}] day {day}: e2e accuracy {acc.value if acc else float('nan'):.3f} ({m.wall_s:.0f} s)")


def _replay_day(
    svc: ServedSystem,
    sessions: list[Any],
    users: Users,
    cfg: ArmConfig,
    asked: dict[str, tuple[EvalItem, dict[str, Any]]],
) -> dict[str, Any]:
    """Every session's turns in order through `/v1/query`; ratings through the feedback route; then
    the reviewer takes up to `reviews_per_day` items of the tier-3 queue it can grade (`asked`: every
    graded answer served so far, by answer id: a review item may be from an earlier day)."""
    stats: Counter[str] = Counter()
    latencies: list[float] = []
    for s in sessions:
        for turn in s.turns:
            try:
                t0 = time.perf_counter()
                ans = svc.ask(turn.question, s.session_id)
                latencies.append((time.perf_counter() - t0) * 1000)
            except ServiceError as exc:
                stats["errors"] += 1
                if stats["errors"] > 20:
                    raise
                _ = exc
                continue
            stats["turns"] += 1
            if turn.item is None:
                continue
            stats["graded"] += 1
            asked[ans["answer_id"]] = (turn.item, ans)
            body = users.react(turn.item, ans)
            if body is not None:
                svc.feedback(ans["answer_id"], body)
                stats["feedback"] += 1
                stats[f"feedback_{body['rating']}"] += 1
    for entry in svc.review_queue():
        if stats["reviews"] >= cfg.users.reviews_per_day:
            break
        aid = str(entry.get("answer_id"))
        if aid in asked:
            svc.review(aid, users.review(*asked[aid]))
            stats["reviews"] += 1
    out: dict[str, Any] = {k: stats.get(k, 0) for k in ("turns", "graded", "feedback", "reviews", "errors")}
    out["feedback_negative"] = stats.get("feedback_negative", 0)
    out["ask_ms_mean"] = round(sum(latencies) / len(latencies), 1) if latencies else None
    return out


def _seed_golden(svc: ServedSystem, data: SimData, n: int, seed: int) -> int:
    """The operator's golden set: `n` traffic items (a fixed sample), through the admin API."""
    import random

    items = [t.item for s in data.traffic for t in s.turns if t.item is not None and t.item.kind != "underspecified"]
    for item in random.Random(f"golden:{seed}").sample(items, min(n, len(items))):
        svc.add_golden(
            {
                "question": item.question,
                "expected_answer": "" if item.should_refuse else (item.reference or ""),
                "required_doc_ids": [f"{data.doc_prefix}{d}" for d in item.gold_docs],
                "should_refuse": item.should_refuse,
                "domain_tags": [data.name],
            }
        )
    return min(n, len(items))


def _wait_until(clock: ScaledClock, when: datetime) -> None:
    while True:
        left = (when - clock.now()).total_seconds() / clock.rate
        if left <= 0:
            return
        time.sleep(min(left, 1.0))


def _collect(result: ArmResult, store: Store) -> None:
    """The loop's own record, from the store: the audit log, the versions, experiments, cost."""
    for a in reversed(store.audit.timeline(limit=5000)):
        result.audit.append(
            {
                "at": a.created_at.isoformat(timespec="seconds"),
                "action": a.action_type,
                "triggered_by": a.triggered_by,
                "actor": a.actor,
                "version_before": a.pipeline_version_before,
                "version_after": a.pipeline_version_after,
                "evidence": a.evidence,
                "expected_delta": a.expected_delta,
                "actual_delta": a.actual_delta,
                "refers_to": a.refers_to,
                "log_id": a.log_id,
            }
        )
    for v in store.pipelines.list_versions():
        result.versions.append({"version": v.version_id, "status": v.status, "created_at": str(v.created_at)})
    for e in store.experiments.list_experiments():
        result.experiments.append(
            {k: str(getattr(e, k, "")) for k in ("experiment_id", "status", "control_version", "treatment_version")}
        )
    from ragloop.improve.engine import DIAGNOSIS_TIER
    from ragloop.store.vocabulary import JobStatus, Tier

    every = list(JobStatus)
    answers = store.queue.count(Tier.HEURISTIC, statuses=every)
    tier2 = store.queue.count(Tier.LLM_JUDGE, statuses=every)
    usage = store.model_calls.usage()
    result.cost.update(
        answers=answers,
        tier2_jobs=tier2,
        tier2_share=round(tier2 / answers, 4) if answers else None,
        diagnosis_jobs=store.queue.count(DIAGNOSIS_TIER, statuses=every),
        model_calls=sum(u.calls for u in usage),
        model_calls_by_model={u.model: u.calls for u in usage},
        # where a local model's time goes (the held-out measurement's own calls are not the loop's: they
        # are in `measurements[*].cpu_s`)
        model_calls_by_purpose=[
            {
                "model": u.model,
                "purpose": u.purpose,
                "calls": u.calls,
                "cached": u.cached,
                "prompt_tokens": u.prompt_tokens,
                "model_s": round(u.model_s, 1),
            }
            for u in store.model_calls.usage(by="purpose")
        ],
        improvement_actions=store.improvement_actions.counts(),
        diagnoses=store.diagnoses.counts(),
        failure_modes=store.diagnoses.mode_counts(),
    )


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (the served processes once closed)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def arm_json(r: ArmResult) -> dict[str, Any]:
    c = r.config
    return {
        "label": c.label,
        "dataset": c.dataset,
        "start": c.start,
        "flip_share": c.users.flip_share,
        "days": c.days,
        "day_minutes": c.day_minutes,
        "split": r.split,
        "measurements": [m.to_json() for m in r.measurements],
        "days_detail": r.days,
        "users": r.users,
        "cost": r.cost,
        "versions": r.versions,
        "experiments": r.experiments,
        "audit": r.audit,
        "errors": r.errors,
    }
