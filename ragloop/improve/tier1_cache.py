"""The tier-1 feature cache: what tier 1 computed for one (question, answer, contexts), shared by workers.

Tier 1's only model call is the support check of the least-supported claim (`tier1.compute_features`);
the rest is pure Python. The same inputs come back more often than one would think: a job redone
after its worker died (the lease ran out mid-job), the same FAQ question answered the same way from
the same passages, a re-evaluation after a tier-1 recalibration. The *features* are cached, not
the score: the score is the stored linear model's (`HeuristicModel`), which a recalibration changes,
while the features of given inputs never change for a given support scorer.

The key is a sha256 of everything the features read (question, answer, contexts, retrieval scores,
refusal) and the support scorer's name, so two scorers never share an entry. Two backends behind
`Tier1Cache`: an in-process LRU (the default: one worker remembers its own), and Redis
(`RAGLOOP_REDIS_URL`: every worker and server of a fleet shares one, with a TTL). The Redis one fails
open: an unreachable Redis is a miss (and a `put` that does nothing), never a failed evaluation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from typing import Any, Protocol

from ragloop.improve.tier1 import Tier1Features, Tier1Input, compute_features
from ragloop.models.scoring.base import Scorer

log = logging.getLogger("ragloop.improve.tier1_cache")

DEFAULT_PREFIX = "ragloop:tier1"
DEFAULT_TTL_S = 7 * 24 * 3600
DEFAULT_MAX_ENTRIES = 10_000


class Tier1Cache(Protocol):
    name: str
    hits: int
    misses: int

    def get(self, key: str) -> Tier1Features | None: ...

    def put(self, key: str, features: Tier1Features) -> None: ...

    def close(self) -> None: ...


def cache_key(item: Tier1Input, scorer: Scorer | None) -> str:
    """sha256 of what the features read, and of the support scorer that reads the claim."""
    blob = json.dumps(
        [
            item.question,
            item.answer,
            list(item.contexts),
            [float(s) for s in item.retrieval_scores],
            bool(item.refused),
            scorer.name if scorer is not None else None,
        ],
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def dump(features: Tier1Features) -> str:
    return json.dumps(
        {
            "values": features.values,
            "length_ratio": features.length_ratio,
            "least_supported_claim": features.least_supported_claim,
            "claim_context": features.claim_context,
            "n_claims": features.n_claims,
            "extra": features.extra,
        }
    )


def load(raw: str | bytes) -> Tier1Features:
    d = json.loads(raw)
    return Tier1Features(
        values={str(k): (None if v is None else float(v)) for k, v in d["values"].items()},
        length_ratio=float(d["length_ratio"]),
        least_supported_claim=d.get("least_supported_claim"),
        claim_context=d.get("claim_context"),
        n_claims=int(d.get("n_claims", 0)),
        extra=dict(d.get("extra", {})),
    )


class MemoryTier1Cache:
    """A bounded LRU in this process (thread-safe); entries are stored serialised, so a caller that
    changes the features it got back never changes the cache."""

    name = "memory"

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> Tier1Features | None:
        with self._lock:
            raw = self._entries.get(key)
            if raw is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
        return load(raw)

    def put(self, key: str, features: Tier1Features) -> None:
        raw = dump(features)
        with self._lock:
            self._entries[key] = raw
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def close(self) -> None:
        """Nothing to release."""


class RedisTier1Cache:
    """`SET {prefix}:{key} json EX ttl` / `GET`: one cache for a fleet of workers; fails open."""

    name = "redis"

    def __init__(self, client: Any, *, prefix: str = DEFAULT_PREFIX, ttl_s: int = DEFAULT_TTL_S) -> None:
        if ttl_s < 1:
            raise ValueError(f"ttl_s must be >= 1, got {ttl_s}")
        self.client = client
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.hits = 0
        self.misses = 0
        self.errors = 0
        """Redis failures answered as misses (a health signal)."""

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisTier1Cache:
        import redis  # the `redis` extra

        return cls(redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5), **kwargs)

    def get(self, key: str) -> Tier1Features | None:
        try:
            raw = self.client.get(f"{self.prefix}:{key}")
            features = None if raw is None else load(raw)
        except Exception as exc:  # Redis down or a foreign value: a miss, never a failed evaluation
            self.errors += 1
            log.warning("tier-1 cache unavailable (%s: %s); computing", type(exc).__name__, exc)
            features = None
        if features is None:
            self.misses += 1
        else:
            self.hits += 1
        return features

    def put(self, key: str, features: Tier1Features) -> None:
        try:
            self.client.set(f"{self.prefix}:{key}", dump(features), ex=self.ttl_s)
        except Exception as exc:
            self.errors += 1
            log.warning("tier-1 cache unavailable (%s: %s); not stored", type(exc).__name__, exc)

    def close(self) -> None:
        self.client.close()


def make_tier1_cache(redis_url: str | None = None) -> Tier1Cache:
    """Redis when a URL is configured (`RAGLOOP_REDIS_URL`), an in-process LRU otherwise."""
    if redis_url:
        return RedisTier1Cache.from_url(redis_url)
    return MemoryTier1Cache()


async def cached_features(item: Tier1Input, scorer: Scorer | None, cache: Tier1Cache | None) -> Tier1Features:
    """`compute_features`, read from and written to `cache` (None: always computed)."""
    if cache is None:
        return await compute_features(item, scorer)
    key = cache_key(item, scorer)
    found = cache.get(key)
    if found is not None:
        return found
    features = await compute_features(item, scorer)
    cache.put(key, features)
    return features
