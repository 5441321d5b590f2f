"""The semantic expansion cache: a paraphrase the exact pin misses gets the cached chunks pre-loaded;
both backends (the collection registry, a real Redis) behave alike; the sketch prefilter finds
what the exact scan finds."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ragloop.improve.remediation import (
    ExpansionBackend,
    ExpansionCache,
    ExpansionEntry,
    RedisExpansionBackend,
    RegistryExpansionBackend,
)
from ragloop.improve.remediation.expansion_cache import sketch_cut
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever
from tests.agent.conftest import DOCS, make_collection
from tests.improve.remediation_support import K1, PARAPHRASE, QUESTION, chunk_of, redis_url

pytestmark = pytest.mark.usefixtures("kb_backend")  # embedded files and PostgreSQL


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = make_collection("kb", DOCS, tmp_path / "docs")
    yield c
    c.close()


@pytest.fixture(params=["registry", "redis"])
def backend(request: pytest.FixtureRequest, coll: Collection) -> Iterator[ExpansionBackend]:
    if request.param == "registry":
        yield RegistryExpansionBackend(coll.registry)
        return
    import redis

    client = redis.Redis.from_url(redis_url())
    b = RedisExpansionBackend(client, coll.name, prefix=f"ragloop-test:{secrets.token_hex(6)}")
    try:
        yield b
    finally:
        client.delete(b.key, b.version_key)
        client.close()


def _entry(coll: Collection, question: str, chunk_ids: list[str], entry_id: str = "e1") -> ExpansionEntry:
    vec = Retriever(coll, K1.retrieval).embedder.embed_one(question)
    return ExpansionEntry(entry_id, question, coll.load().manifest.embedder, vec, tuple(chunk_ids), "test", 0.0)


def test_backend_round_trip_bumps_the_version(coll: Collection, backend: ExpansionBackend) -> None:
    assert backend.version() == 0 and backend.entries() == []
    ferry = chunk_of(coll, "ferry.md")
    v1 = backend.put(_entry(coll, QUESTION, [ferry]))
    got = backend.get("e1")
    assert got is not None and got.chunk_ids == (ferry,) and got.query == QUESTION
    assert np.allclose(got.vector, _entry(coll, QUESTION, [ferry]).vector)
    assert backend.version() == v1 >= 1
    assert backend.remove("e1") and backend.get("e1") is None
    assert backend.version() > v1
    assert not backend.remove("e1")


def test_a_paraphrase_the_exact_pin_misses_gets_the_cached_chunks(coll: Collection, backend: ExpansionBackend) -> None:
    ferry = chunk_of(coll, "ferry.md")
    plain = Retriever(coll, K1.retrieval)
    assert [h.chunk_id for h in plain.retrieve(PARAPHRASE)] != [ferry]  # the "embedding failure"
    coll.registry.pin(QUESTION, [ferry])  # today's exact pin: the paraphrase is another string
    assert [h.chunk_id for h in plain.retrieve(QUESTION)] == [ferry]
    assert [h.chunk_id for h in plain.retrieve(PARAPHRASE)] != [ferry]

    cache = ExpansionCache(backend, threshold=0.90, refresh_s=0.0, embedder=coll.load().manifest.embedder)
    backend.put(_entry(coll, QUESTION, [ferry]))
    semantic = Retriever(coll, K1.retrieval, expansion=cache)
    hits = semantic.retrieve(PARAPHRASE)
    assert [h.chunk_id for h in hits] == [ferry] and "pinned" in hits[0].ranks
    # an unrelated question on the same topic stays below the threshold
    assert [h.chunk_id for h in semantic.retrieve("When was the Quill Tower completed?")] != [ferry]
    # a stricter threshold than the paraphrase's cosine (0.934) misses it
    strict = ExpansionCache(backend, threshold=0.95, refresh_s=0.0)
    assert strict.lookup(PARAPHRASE, semantic.embedder.embed_one(PARAPHRASE)) == []


def test_a_new_entry_is_seen_after_the_refresh_interval(coll: Collection, backend: ExpansionBackend) -> None:
    now = [0.0]
    cache = ExpansionCache(backend, refresh_s=1.0, monotonic=lambda: now[0])
    qvec = _entry(coll, QUESTION, []).vector
    assert cache.lookup(QUESTION, qvec) == []
    backend.put(_entry(coll, QUESTION, ["c1", "c2"]))
    assert cache.lookup(QUESTION, qvec) == []  # within the interval: no backend round trip
    now[0] = 1.5
    assert cache.lookup(QUESTION, qvec) == ["c1", "c2"]
    backend.remove("e1")
    now[0] = 3.0
    assert cache.lookup(QUESTION, qvec) == []


def test_entries_of_another_embedder_or_a_zero_vector_never_match(coll: Collection) -> None:
    backend = RegistryExpansionBackend(coll.registry)
    e = _entry(coll, QUESTION, ["c1"])
    backend.put(ExpansionEntry("other", e.query, "onnx:all-minilm-l6-v2", e.vector, ("c9",)))
    backend.put(e)
    cache = ExpansionCache(backend, refresh_s=0.0, embedder=e.embedder)
    assert cache.lookup(QUESTION, e.vector) == ["c1"]
    assert cache.lookup(QUESTION, np.zeros_like(e.vector)) == []


def test_the_sketch_prefilter_finds_what_the_exact_scan_finds() -> None:
    rng = np.random.default_rng(7)
    dim, n = 64, 3000

    class Mem:
        name = "mem"

        def __init__(self, entries: list[ExpansionEntry]) -> None:
            self._entries = entries

        def version(self) -> int:
            return 1

        def entries(self) -> list[ExpansionEntry]:
            return self._entries

    base = rng.standard_normal((n, dim)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    entries = [ExpansionEntry(f"e{i}", "", "x", base[i], (f"c{i}",)) for i in range(n)]
    exact = ExpansionCache(Mem(entries), refresh_s=0.0, exact_below=10**9, max_chunks=50)  # type: ignore[arg-type]
    sketch = ExpansionCache(Mem(entries), refresh_s=0.0, exact_below=1, max_chunks=50)  # type: ignore[arg-type]
    found = 0
    for i in range(200):
        # a query at cosine just above the threshold to entry i
        noise = rng.standard_normal(dim).astype(np.float32)
        noise -= (noise @ base[i]) * base[i]
        noise /= np.linalg.norm(noise)
        cos = 0.905
        q = cos * base[i] + np.sqrt(1 - cos**2) * noise
        a, b = exact.lookup("", q), sketch.lookup("", q)
        assert a == b
        found += f"c{i}" in a
    assert found == 200
    assert sketch_cut(0.9) == 39  # 128 bits: mean 18.4 at the threshold angle, cut 5 sd above


def test_a_background_reload_keeps_serving_the_previous_entries(coll: Collection) -> None:
    inner = RegistryExpansionBackend(coll.registry)
    gate = threading.Event()

    class Slow:
        name = "slow"

        def version(self) -> int:
            return inner.version()

        def entries(self) -> list[ExpansionEntry]:
            gate.wait(10)  # a big reload
            return inner.entries()

    inner.put(_entry(coll, QUESTION, ["c1"]))
    now = [0.0]
    cache = ExpansionCache(Slow(), refresh_s=1.0, background=True, monotonic=lambda: now[0])  # type: ignore[arg-type]
    qvec = _entry(coll, QUESTION, []).vector
    gate.set()
    assert cache.lookup(QUESTION, qvec) == ["c1"]  # the first load is synchronous
    gate.clear()
    inner.put(_entry(coll, QUESTION, ["c2"]))
    now[0] = 2.0
    assert cache.lookup(QUESTION, qvec) == ["c1"]  # not blocked: the previous entries serve
    assert cache.loader is not None and cache.loader.is_alive()
    gate.set()
    cache.loader.join(10)
    assert cache.lookup(QUESTION, qvec) == ["c2"]


def test_the_served_agent_consults_the_cache(coll: Collection, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragloop.service.pipelines import default_agent_factory

    monkeypatch.delenv("RAGLOOP_REDIS_URL", raising=False)
    ferry = chunk_of(coll, "ferry.md")
    RegistryExpansionBackend(coll.registry).put(_entry(coll, QUESTION, [ferry]))
    agent = default_agent_factory(coll, K1)
    retriever = agent.runtime.retriever
    assert isinstance(retriever.expansion, ExpansionCache) and retriever.expansion.fail_open
    assert [h.chunk_id for h in retriever.retrieve(PARAPHRASE)] == [ferry]


def test_a_failing_backend_fails_open_on_the_serving_path(coll: Collection) -> None:
    class Down:
        name = "down"

        def version(self) -> int:
            raise ConnectionError("redis is down")

    qvec = _entry(coll, QUESTION, []).vector
    serving = ExpansionCache(Down(), refresh_s=0.0, fail_open=True)  # type: ignore[arg-type]
    assert serving.lookup(QUESTION, qvec) == []
    strict = ExpansionCache(Down(), refresh_s=0.0)  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):
        strict.lookup(QUESTION, qvec)
