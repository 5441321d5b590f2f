"""The tier-1 feature cache: one support-scorer call per distinct input across a fleet (two caches on
one real Redis stand for two workers), keys that separate what the features read and the scorer,
the in-process LRU default, and a Redis outage that is a miss rather than a failed evaluation."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pytest
import redis

from ragloop.improve.tier1 import Tier1Input, compute_features
from ragloop.improve.tier1_cache import (
    MemoryTier1Cache,
    RedisTier1Cache,
    cache_key,
    cached_features,
    make_tier1_cache,
)
from ragloop.models.scoring import make_scorer
from ragloop.models.scoring.base import Scorer
from tests.store.conftest import redis_test_url

pytestmark = pytest.mark.anyio

ITEM = Tier1Input(
    question="When was the Zorblat Bridge completed?",
    answer="The Zorblat Bridge was completed in 1887 [1]. Unicorns guard its gate [1].",
    contexts=["The Zorblat Bridge was completed in 1887 by Marta Quill. It spans the river Vell."],
    retrieval_scores=[0.9, 0.5, 0.4],
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CountingScorer:
    """The lexical scorer, counting support calls (the model call the cache saves)."""

    def __init__(self) -> None:
        self.inner = make_scorer("lexical")
        self.name = self.inner.name
        self.calls = 0

    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> Any:
        self.calls += 1
        return await self.inner.support(claims, contexts)


@pytest.fixture
def prefix() -> Iterator[str]:
    p = f"ragloop:test-tier1:{secrets.token_hex(4)}"
    yield p
    client = redis.Redis.from_url(redis_test_url())
    try:
        keys = list(client.scan_iter(match=f"{p}:*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


async def test_two_workers_share_one_redis_cache(prefix: str) -> None:
    url = redis_test_url()
    a, b = (RedisTier1Cache.from_url(url, prefix=prefix, ttl_s=60) for _ in range(2))
    scorer = CountingScorer()
    try:
        first = await cached_features(ITEM, cast(Scorer, scorer), a)
        again = await cached_features(ITEM, cast(Scorer, scorer), b)  # another worker, same inputs
        assert scorer.calls == 1 and (a.misses, b.hits) == (1, 1)
        assert again.values == first.values and again.values["support"] is not None
        assert again.least_supported_claim == first.least_supported_claim == "Unicorns guard its gate."
        assert again.as_scores() == (await compute_features(ITEM, make_scorer("lexical"))).as_scores()
        ttl = a.client.ttl(f"{prefix}:{cache_key(ITEM, cast(Scorer, scorer))}")
        assert 0 < ttl <= 60
    finally:
        a.close()
        b.close()


def test_the_key_covers_what_the_features_read() -> None:
    lexical = make_scorer("lexical")
    base = cache_key(ITEM, lexical)
    changed = [
        Tier1Input(ITEM.question + "?", ITEM.answer, ITEM.contexts, ITEM.retrieval_scores),
        Tier1Input(ITEM.question, ITEM.answer + " More.", ITEM.contexts, ITEM.retrieval_scores),
        Tier1Input(ITEM.question, ITEM.answer, [*ITEM.contexts, "x"], ITEM.retrieval_scores),
        Tier1Input(ITEM.question, ITEM.answer, ITEM.contexts, [0.9, 0.5]),
        Tier1Input(ITEM.question, ITEM.answer, ITEM.contexts, ITEM.retrieval_scores, refused=True),
    ]
    keys = {cache_key(item, lexical) for item in changed} | {cache_key(ITEM, None)}
    assert base not in keys and len(keys) == len(changed) + 1
    assert (
        cache_key(Tier1Input(ITEM.question, ITEM.answer, list(ITEM.contexts), ITEM.retrieval_scores), lexical) == base
    )


async def test_memory_cache_is_a_bounded_lru_and_the_default() -> None:
    cache = make_tier1_cache(None)
    assert isinstance(cache, MemoryTier1Cache)
    small = MemoryTier1Cache(max_entries=2)
    items = [Tier1Input(f"q{i}", f"answer number {i} here [1].", ["ctx"]) for i in range(3)]
    for item in items:
        await cached_features(item, None, small)
    assert small.get(cache_key(items[0], None)) is None  # the oldest went
    got = small.get(cache_key(items[2], None))
    assert got is not None
    got.values["bm25_overlap"] = 99.0  # a caller's change never reaches the cache
    again = small.get(cache_key(items[2], None))
    assert again is not None and again.values["bm25_overlap"] != 99.0
    with pytest.raises(ValueError):
        MemoryTier1Cache(max_entries=0)


async def test_redis_down_is_a_miss_not_a_failure() -> None:
    cache = RedisTier1Cache.from_url("redis://127.0.0.1:1/0")
    scorer = CountingScorer()
    try:
        for _ in range(2):
            feats = await cached_features(ITEM, cast(Scorer, scorer), cache)
        assert feats.values["support"] is not None
        assert scorer.calls == 2 and cache.errors == 4 and cache.hits == 0
    finally:
        cache.close()
