"""The chat-response cache's SQLite file (SQLAlchemy Core): a cache, not a log.

One file, `settings.home / "cache" / "chat.sqlite"` by default, beside the embedding cache; the
table is created idempotently on open, so every process can just open it. WAL mode and a busy
timeout let a CLI and a worker share it. Calls are short single-row statements, made inline from
async code. The call log and the usage totals are the service database's `model_calls` table
(`ragloop.models.chat.calllog`); the `models.sqlite` file of earlier versions, which held a second
call log, is no longer read or written.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    Column,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from ragloop.config.settings import Settings
from ragloop.sqlite import sqlite_engine

CACHE_PATH = Path("cache") / "chat.sqlite"
"""Relative to `RAGLOOP_HOME`."""

metadata = MetaData()

chat_cache = Table(
    "chat_cache",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("model", String, nullable=False),
    Column("response", Text, nullable=False),  # ChatResponse JSON
    Column("created_at", Float, nullable=False),
    Column("last_used", Float, nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Index("ix_chat_cache_last_used", "last_used"),
)


class ChatCacheDB:
    """Owns the engine; `close()` (or `with`) disposes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # durability "normal": a cache (a lost entry is a miss); see ragloop.sqlite for the policy
        self.engine: Engine = sqlite_engine(f"sqlite:///{path}", durability="normal")
        metadata.create_all(self.engine)  # idempotent: checks before creating

    @classmethod
    def for_settings(cls, settings: Settings | None = None) -> ChatCacheDB:
        settings = settings or Settings.from_env()
        return cls(settings.home / CACHE_PATH)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> ChatCacheDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
