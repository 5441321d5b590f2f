"""The embedding cache in PostgreSQL and ingest embedding spread over `ragloop worker` processes.

Real PostgreSQL (a fresh schema per test; skipped when unreachable, failing under CI=true), real
worker processes: one embeds part of an ingest's slices; one killed with SIGKILL while it holds a
slice loses nothing (the slice's lease expires and the ingest embeds it itself).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from ragloop.config.settings import Settings
from ragloop.models import CachedEmbedder, HashedEmbedder, make_embedder
from ragloop.models.shared_cache import SharedCachedEmbedder, SharedEmbeddingStore, slice_size
from tests.store.conftest import DEFAULT_POSTGRES_URL, POSTGRES_URL_ENV, _ci, require_postgres

pytestmark = pytest.mark.postgres
RAGLOOP = Path(sys.executable).parent / "ragloop"
REPO = Path(__file__).resolve().parents[2]
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
]


def corpus(n: int, seed: int = 0) -> list[str]:
    """`n` texts of 1 to 60 words (mixed lengths, as an ingest's chunks and sentences are)."""
    rng = np.random.default_rng(seed)
    return [f"text {i}: " + " ".join(rng.choice(WORDS, size=int(rng.integers(1, 60)))) for i in range(n)]


@pytest.fixture
def pg_url() -> Iterator[str]:
    admin_url = require_postgres(os.environ.get(POSTGRES_URL_ENV, DEFAULT_POSTGRES_URL), ci=_ci())
    schema = f"t_{secrets.token_hex(6)}"
    admin = create_engine(admin_url, poolclass=NullPool)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield make_url(admin_url).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(False)
    finally:
        SharedEmbeddingStore.dispose_all()
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


def _slices_left(url: str) -> list[tuple[str, str | None, int]]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT status, leased_by, attempts FROM embedding_slices")).all()
            return [(r[0], r[1], int(r[2])) for r in rows]
    finally:
        engine.dispose()


class SlowHashed(HashedEmbedder):
    """The hashed embedder (same name, same vectors) taking `delay_s` per call: an ingesting process
    slower than its workers, so the test can see them take slices."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(384)
        self.delay_s = delay_s
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        time.sleep(self.delay_s)
        return super().embed(texts)


def test_the_cache_is_shared_by_instances_and_chosen_by_the_database_url(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = corpus(50) + corpus(5)  # duplicates
    a = SharedCachedEmbedder(HashedEmbedder(384), pg_url)
    first = a.embed_many(texts)
    assert (a.misses, a.hits) == (50, 0)  # a duplicate of a missing text is not a hit
    b = SharedCachedEmbedder(SlowHashed(0.0), pg_url)  # another instance, another home: no re-embedding
    second = b.embed_many(texts)
    assert (b.misses, b.hits) == (0, 55) and isinstance(b.inner, SlowHashed) and b.inner.calls == 0
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, HashedEmbedder(384).embed(texts))
    b._store(["x"], np.ones((1, 384), dtype=np.float32))  # a second writer of a row: first one wins
    b._store(["x"], np.zeros((1, 384), dtype=np.float32))
    assert float(b._lookup(["x"])["x"].sum()) == 384.0
    SharedEmbeddingStore(pg_url).dispose()  # a second opener of existing tables is not an error

    monkeypatch.setenv("RAGLOOP_DATABASE_URL", pg_url)
    monkeypatch.delenv("RAGLOOP_EMBEDDING_CACHE_URL", raising=False)
    chosen = make_embedder("test:hashed-384", Settings(home=tmp_path / "h"))
    assert isinstance(chosen, SharedCachedEmbedder) and chosen.distributed is False
    monkeypatch.setenv("RAGLOOP_EMBEDDING_CACHE_URL", "off")
    local = make_embedder("test:hashed-384", Settings(home=tmp_path / "h"))
    assert isinstance(local, CachedEmbedder) and not isinstance(local, SharedCachedEmbedder)
    local.close()


def test_distributed_ingest_with_no_worker_equals_the_local_path(pg_url: str) -> None:
    """The real MiniLM: slices of 16 (another batching than the local path's) give the same rows."""
    from ragloop.models import OnnxMiniLMEmbedder

    inner = OnnxMiniLMEmbedder(threads=1)
    texts = corpus(96, seed=1) + ["", "text 3: repeated"] * 2
    local = inner.embed_many(texts)
    seen: list[tuple[int, int]] = []
    dist = SharedCachedEmbedder(inner, pg_url, distributed=True, slice_texts=16)
    got = dist.embed_many(texts, lambda done, total: seen.append((done, total)))
    assert dist.slices_total == dist.slices_here == 7 and seen[-1] == (98, 98)
    assert [slice_size(n) for n in (10, 1000, 100_000)] == [16, 32, 128]  # ~32 slices, 16 to 128 texts
    cos = (got * local).sum(axis=1)
    live = np.linalg.norm(local, axis=1) > 0
    assert float(cos[live].min()) >= 0.9999 and not got[~live].any()
    assert _slices_left(pg_url) == []


def _start_worker(tmp_path: Path, url: str, name: str, *args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        RAGLOOP_HOME=str(tmp_path / name),
        RAGLOOP_EMBEDDING_CACHE_URL=url,
        RAGLOOP_DISTRIBUTED_EMBEDDING="on",
        RAGLOOP_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    with (tmp_path / f"{name}.log").open("w") as log:
        proc = subprocess.Popen(
            [str(RAGLOOP), "worker", "--embed-only", "--poll-interval", "0.05", "--log-level", "warning", *args],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while "embedding worker" not in (tmp_path / f"{name}.log").read_text():
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / f"{name}.log").read_text()
        time.sleep(0.05)
    return proc


def test_a_worker_process_embeds_part_of_the_ingest(pg_url: str, tmp_path: Path) -> None:
    worker = _start_worker(tmp_path, pg_url, "w1")
    try:
        texts = corpus(200, seed=2)
        dist = SharedCachedEmbedder(SlowHashed(0.05), pg_url, distributed=True, slice_texts=8)
        got = dist.embed_many(texts)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    log = (tmp_path / "w1.log").read_text()
    assert dist.slices_total == 25 and 0 < dist.slices_here < 25, log
    assert f"{25 - dist.slices_here} slices" in log
    np.testing.assert_array_equal(got, HashedEmbedder(384).embed(texts))
    assert _slices_left(pg_url) == []


def test_a_worker_killed_mid_slice_loses_nothing(pg_url: str, tmp_path: Path) -> None:
    worker = _start_worker(tmp_path, pg_url, "doomed", "--job-delay", "60", "--lease-seconds", "2")
    texts = corpus(32, seed=3)
    dist = SharedCachedEmbedder(SlowHashed(0.5), pg_url, distributed=True, slice_texts=8)
    out: list[np.ndarray] = []
    ingest = threading.Thread(target=lambda: out.append(dist.embed_many(texts)))
    start = time.monotonic()
    ingest.start()
    try:
        deadline = time.monotonic() + 20
        while not any(by and by.startswith("embed:") for _, by, _ in _slices_left(pg_url)):
            assert time.monotonic() < deadline, "the worker never claimed a slice"
            time.sleep(0.05)
    finally:
        worker.kill()  # SIGKILL while it sleeps on a claimed slice
        worker.wait(timeout=10)
    ingest.join(timeout=30)
    assert out, "the ingest did not finish"
    assert dist.slices_total == 4 and dist.slices_here == 4  # the dead worker's slice too, after its lease
    assert time.monotonic() - start >= 2.0
    np.testing.assert_array_equal(out[0], HashedEmbedder(384).embed(texts))
    assert _slices_left(pg_url) == []
