"""The model layer's SQLite file: response cache, call log and usage ledger (SQLAlchemy Core).

One file, `settings.home / "models.sqlite"` by default; tables are created idempotently on
open, so every process can just open it. WAL mode and a busy timeout let a CLI and a worker
share it. Calls are short single-row statements, made inline from async code.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    Boolean,
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

chat_calls = Table(
    "chat_calls",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ts", Float, nullable=False),
    Column("run_id", String, nullable=True),
    Column("model", String, nullable=False),
    Column("request_key", String(64), nullable=False),
    Column("prompt", Text, nullable=False),  # the messages as JSON
    Column("response", Text, nullable=True),
    Column("prompt_tokens", Integer, nullable=False, default=0),
    Column("completion_tokens", Integer, nullable=False, default=0),
    Column("latency_ms", Float, nullable=False, default=0.0),
    Column("cached", Boolean, nullable=False, default=False),
    Column("cost_usd", Float, nullable=True),  # NULL: no price known for the model
    Column("error", Text, nullable=True),  # "ErrorClass: message" when the call failed
    Index("ix_chat_calls_run", "run_id"),
    Index("ix_chat_calls_model_ts", "model", "ts"),
)

usage_ledger = Table(
    "usage_ledger",
    metadata,
    Column("day", String(10), primary_key=True),  # UTC, YYYY-MM-DD
    Column("model", String, primary_key=True),
    Column("requests", Integer, nullable=False, default=0),
    Column("prompt_tokens", Integer, nullable=False, default=0),
    Column("completion_tokens", Integer, nullable=False, default=0),
    Column("cost_usd", Float, nullable=False, default=0.0),
    Column("unpriced_requests", Integer, nullable=False, default=0),
)


class ModelsDB:
    """Owns the engine; `close()` (or `with`) disposes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # durability "normal": a call log and usage ledger; see ragloop.sqlite for the policy
        self.engine: Engine = sqlite_engine(f"sqlite:///{path}", durability="normal")
        metadata.create_all(self.engine)  # idempotent: checks before creating

    @classmethod
    def for_settings(cls, settings: Settings | None = None) -> ModelsDB:
        settings = settings or Settings.from_env()
        return cls(settings.home / "models.sqlite")

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> ModelsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
