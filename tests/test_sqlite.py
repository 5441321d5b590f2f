"""ragloop.sqlite: one connection policy for every SQLite file, with durability chosen per use."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from ragloop import sqlite
from ragloop.agent.memory import ConversationLog, open_checkpointer
from ragloop.ingest.registry import Registry
from ragloop.models.cache import CachedEmbedder
from ragloop.models.chat.db import ChatCacheDB
from ragloop.models.embedding import HashedEmbedder
from ragloop.store.db import SQLITE_BUSY_TIMEOUT_S, make_engine

NORMAL, FULL = 1, 2


def _engine_pragmas(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        return {
            name: conn.execute(text(f"PRAGMA {name}")).scalar()
            for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
        }


def test_the_policy_on_a_plain_connection(tmp_path: Path) -> None:
    conn = sqlite.connect(tmp_path / "sub" / "x.sqlite", durability="full", busy_timeout_s=2.5)
    try:
        got = [conn.execute(f"PRAGMA {n}").fetchone()[0] for n in ("journal_mode", "synchronous", "busy_timeout")]
        assert got == ["wal", FULL, 2500]
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    finally:
        conn.close()


def test_unknown_durability_is_refused() -> None:
    with pytest.raises(ValueError):
        sqlite.pragmas(durability="sometimes")  # type: ignore[arg-type]


def test_in_memory_engines_skip_wal() -> None:
    engine = sqlite.sqlite_engine("sqlite://", durability="normal")
    try:
        got = _engine_pragmas(engine)
        assert got["journal_mode"] == "memory" and got["synchronous"] == NORMAL and got["foreign_keys"] == 1
    finally:
        engine.dispose()


def test_each_use_gets_its_durability(tmp_path: Path) -> None:
    store = make_engine(f"sqlite:///{tmp_path / 'ragloop.db'}")
    registry = Registry.for_directory(tmp_path / "kb")
    models = ChatCacheDB(tmp_path / "cache" / "chat.sqlite")
    log = ConversationLog(f"sqlite:///{tmp_path / 'memory' / 'log.sqlite'}")
    try:
        for engine, sync in ((store, NORMAL), (registry.engine, FULL), (models.engine, NORMAL), (log.engine, FULL)):
            got = _engine_pragmas(engine)
            assert got["journal_mode"] == "wal" and got["foreign_keys"] == 1, got
            assert got["synchronous"] == sync, (engine.url, got)
        assert _engine_pragmas(store)["busy_timeout"] == int(SQLITE_BUSY_TIMEOUT_S * 1000)
    finally:
        store.dispose()
        registry.close()
        models.close()
        log.close()

    cache = CachedEmbedder(HashedEmbedder(8), tmp_path / "cache" / "emb.sqlite")
    try:
        assert cache._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert cache._db.execute("PRAGMA synchronous").fetchone()[0] == NORMAL
    finally:
        cache.close()


def test_the_checkpointer_is_full_and_wal(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.sqlite"

    async def probe() -> list[Any]:
        async with open_checkpointer(f"sqlite:///{path}") as saver:
            conn = saver.conn  # type: ignore[attr-defined]
            out = []
            for name in ("journal_mode", "synchronous", "busy_timeout"):
                async with conn.execute(f"PRAGMA {name}") as cur:
                    out.append((await cur.fetchone())[0])
            return out

    assert asyncio.run(probe()) == ["wal", FULL, int(sqlite.BUSY_TIMEOUT_S * 1000)]


def test_the_helper_imports_nothing_of_ragloop() -> None:
    code = (
        "import sys, ragloop.sqlite;"
        "bad = sorted(m for m in sys.modules if m.startswith('ragloop.') and m != 'ragloop.sqlite');"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
