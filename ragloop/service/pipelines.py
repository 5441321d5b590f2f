"""Which pipeline answers: the active stored pipeline version, its agents, and the last known-good one.

The active version lives in the store (`pipeline_versions`, switched by activate/rollback, audited).
`AgentManager` reads it (cached for a second, dropped at once on a rollback made here), builds one
`Agent` per (collection, version, top_k) and keeps the last agent that answered successfully per
collection: when the active version cannot be built or fails, that one serves instead (the design's
"serve from the last known-good pipeline configuration").
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragloop.agent.memory import ConversationMemory
from ragloop.config import PipelineConfig, Settings
from ragloop.models.chat import CallSink
from ragloop.retrieval.collection import Collection, CollectionError
from ragloop.service.memory import service_memory
from ragloop.store import Store

if TYPE_CHECKING:
    from ragloop.agent.api import Agent

log = logging.getLogger("ragloop.service")

AgentFactory = Callable[[Collection, PipelineConfig], "Agent"]
VERSION_TTL_S = 1.0
MAX_AGENTS = 16


class NoSuchCollectionError(LookupError):
    pass


class NotIndexedError(RuntimeError):
    pass


def default_agent_factory(collection: Collection, config: PipelineConfig, calls: CallSink | None = None) -> Agent:
    """The agent with the collection's semantic expansion cache (the remediation's entries: Redis
    with RAGLOOP_REDIS_URL, else the collection registry) wired into its retriever, and its model
    calls logged to `calls` (the store's `model_calls`)."""
    from ragloop.agent.build import build_agent
    from ragloop.improve.remediation import serving_expansion

    return build_agent(collection, config, expansion=serving_expansion(collection), calls=calls)


@dataclass(frozen=True)
class Served:
    agent: Agent
    version_id: str
    degraded: bool
    key: tuple[str, str, int | None]


def ensure_active_version(store: Store, config: PipelineConfig | None, *, actor: str = "ragloop serve") -> str:
    """Register `config` and make it active when it is given explicitly or when nothing is active yet;
    otherwise keep serving the active version. Returns the active version id."""
    current = store.pipelines.current()
    if config is None:
        if current is not None:
            return current.version_id
        config = PipelineConfig()
    row = store.pipelines.register_config(config)
    if current is None or current.version_id != row.version_id:
        store.pipelines.activate(row.version_id, actor=actor, reason="service start-up configuration")
    return row.version_id


class AgentManager:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        factory: AgentFactory | None = None,
        memory: ConversationMemory | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.factory = factory or functools.partial(default_agent_factory, calls=store.model_calls)
        self.memory = memory or service_memory(store.db.engine.url, settings)
        self._collections: dict[str, Collection] = {}
        self._agents: OrderedDict[tuple[str, str, int | None], Agent] = OrderedDict()
        self._last_good: dict[str, tuple[str, str, int | None]] = {}
        self._version: tuple[float, str, PipelineConfig] | None = None
        self._lock = threading.Lock()
        self._build_locks: dict[tuple[str, str, int | None], asyncio.Lock] = {}
        self._configs: dict[str, PipelineConfig] = {}

    # ----------------------------------------------------------------- versions

    def active(self) -> tuple[str, PipelineConfig]:
        now = time.monotonic()
        cached = self._version
        if cached is not None and now - cached[0] < VERSION_TTL_S:
            return cached[1], cached[2]
        try:
            row = self.store.pipelines.current()
        except Exception:
            if cached is not None:  # the store hiccupped: keep serving the version we know
                return cached[1], cached[2]
            raise
        if row is None:
            config = PipelineConfig()
            version = config.version_id
        else:
            version = row.version_id
            config = (
                cached[2] if cached is not None and cached[1] == version else PipelineConfig.model_validate(row.config)
            )
        self._version = (now, version, config)
        return version, config

    def invalidate(self) -> None:
        self._version = None

    # ----------------------------------------------------------------- collections

    def collection(self, name: str) -> Collection:
        with self._lock:
            coll = self._collections.get(name)
            if coll is None:
                try:
                    coll = Collection(name, self.settings)
                except CollectionError as exc:
                    raise NoSuchCollectionError(str(exc)) from None
                if not coll.exists():
                    # no inventory in the message: it reaches user keys (admins list collections elsewhere)
                    raise NoSuchCollectionError(f"no collection named {name!r}")
                self._collections[name] = coll
            return coll

    def check_index(self, name: str) -> int:
        coll = self.collection(name)
        if coll.generation() == 0:
            raise NotIndexedError(f"collection {name!r} has no index yet: ingest documents into it first")
        try:
            return coll.load().manifest.n_chunks
        except CollectionError as exc:
            raise NotIndexedError(str(exc)) from None

    # ----------------------------------------------------------------- agents

    def version(self, version_id: str) -> PipelineConfig:
        """A stored version's config (versions are immutable, so it is cached for good)."""
        config = self._configs.get(version_id)
        if config is None:
            row = self.store.pipelines.get(version_id)
            if row is None:
                raise LookupError(f"no pipeline version {version_id!r}")
            config = self._configs[version_id] = PipelineConfig.model_validate(row.config)
        return config

    async def serve(self, collection: str, top_k: int | None = None, version_id: str | None = None) -> Served:
        """The agent for the active version, or for `version_id` (an experiment's arm) (raises
        NoSuchCollection / NotIndexed); on a build failure, the last known-good agent for the
        collection, marked degraded."""
        self.check_index(collection)
        version, config = self.active() if version_id is None else (version_id, self.version(version_id))
        if top_k is not None and top_k == config.retrieval.k:
            top_k = None
        key = (collection, version, top_k)
        try:
            agent = await self._agent(key, config)
            return Served(agent, version, False, key)
        except Exception as exc:
            fallback = self.fallback(collection, exclude=key)
            if fallback is None:
                raise
            log.error(
                "pipeline %s cannot be built (%s: %s); serving the last good pipeline %s",
                version,
                type(exc).__name__,
                str(exc)[:200],
                fallback.version_id,
            )
            return fallback

    def fallback(self, collection: str, exclude: tuple[str, str, int | None]) -> Served | None:
        key = self._last_good.get(collection)
        if key is None or key == exclude or key not in self._agents:
            return None
        return Served(self._agents[key], key[1], True, key)

    def mark_good(self, served: Served) -> None:
        self._last_good[served.key[0]] = served.key

    async def _agent(self, key: tuple[str, str, int | None], config: PipelineConfig) -> Agent:
        agent = self._agents.get(key)
        if agent is not None:
            self._agents.move_to_end(key)
            return agent
        lock = self._build_locks.setdefault(key, asyncio.Lock())
        async with lock:
            agent = self._agents.get(key)
            if agent is not None:
                return agent
            cfg = config if key[2] is None else config.with_overrides(retrieval={"k": key[2]})
            coll = self.collection(key[0])
            agent = await asyncio.to_thread(self.factory, coll, cfg)
            agent.memory = self.memory
            self._agents[key] = agent
            keep = set(self._last_good.values())
            for old in [k for k in self._agents if k not in keep][: max(0, len(self._agents) - MAX_AGENTS)]:
                del self._agents[old]
            return agent

    async def any_agent(self, collection: str) -> Agent | None:
        """A loaded agent, else the one for `collection`; None when none can be built."""
        if self._agents:
            return next(reversed(self._agents.values()))
        try:
            return (await self.serve(collection)).agent
        except Exception:
            return None

    def loaded(self) -> list[tuple[str, str, int | None]]:
        return list(self._agents)

    def close(self) -> None:
        for coll in self._collections.values():
            coll.close()
        self._collections.clear()
        self._agents.clear()
        self.memory.close()


@dataclass(frozen=True)
class Route:
    """Which arm of the running experiment serves a session, and with which pipeline version."""

    experiment_id: str
    variant: str
    version_id: str


class ExperimentRouter:
    """The query path's view of experiments: the running one (re-read at most every second) and the
    session's variant by the assigner (Redis-cached when `RAGLOOP_REDIS_URL` is set). A halted,
    stopped or promoted experiment is no longer running, so everyone gets the current version."""

    def __init__(self, store: Store, redis_url: str | None = None) -> None:
        from ragloop.experiments import make_assigner

        self.store = store
        self.assigner = make_assigner(redis_url)
        self._cached: tuple[float, Route | None, float, str, str] | None = None

    def _running(self) -> tuple[str, float, str, str] | None:
        from ragloop.experiments.registry import running_experiment

        now = time.monotonic()
        if self._cached is not None and now - self._cached[0] < VERSION_TTL_S:
            c = self._cached
            return None if c[1] is None else (c[1].experiment_id, c[2], c[3], c[4])
        try:
            row = running_experiment(self.store)
        except Exception as exc:  # the query path never fails for an experiment lookup
            log.warning("running experiment lookup failed (%s); serving the current version", exc)
            return None
        if row is None or row.control_version is None or row.treatment_version is None:
            self._cached = (now, None, 0.0, "", "")
            return None
        marker = Route(row.experiment_id, "", "")
        self._cached = (now, marker, row.traffic_split, row.control_version, row.treatment_version)
        return row.experiment_id, row.traffic_split, row.control_version, row.treatment_version

    def invalidate(self) -> None:
        self._cached = None

    def route(self, session_key: str) -> Route | None:
        from ragloop.experiments import Variant

        running = self._running()
        if running is None:
            return None
        experiment_id, split, control, treatment = running
        assignment = self.assigner.assign(experiment_id, session_key, split)
        version = treatment if assignment.variant is Variant.TREATMENT else control
        return Route(experiment_id, assignment.variant.value, version)

    def close(self) -> None:
        self.assigner.close()
