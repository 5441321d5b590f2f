"""`Cached`: a SQLite response cache (`ChatCacheDB`) keyed by the request hash, with a TTL and a size cap.

A hit is returned with `cached=True` and the latency the original call took (so latency
reports stay honest about what the model costs); structured output is re-validated from the
stored JSON. Entries past the TTL are misses and are deleted; past the size cap (entries or
bytes) the least recently used go first. Failures are never cached. Streaming passes through.
The file is read and written in a worker thread (the answer graph's event loop never waits on a
SQLite lock), and a cache that cannot be read or written costs a miss and a warning, never the call.

Personal data: the key is a hash of the request, but the entry holds the response's text, so a
response in which the `Redactor` (`ragloop.text.pii`) finds personal data is not cached (redacting
it would change what a later hit returns; storing it would keep the data under `RAGLOOP_HOME`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sqlalchemy import Connection, delete, func, select, update
from sqlalchemy.exc import SQLAlchemyError

from ragloop.models.chat.base import ChatModel, ChatRequest, ChatResponse
from ragloop.models.chat.db import ChatCacheDB, chat_cache
from ragloop.models.chat.wrappers import WrapperModel
from ragloop.text.pii import Redactor, default_redactor

log = logging.getLogger("ragloop.models")


class Cached(WrapperModel):
    def __init__(
        self,
        inner: ChatModel,
        db: ChatCacheDB,
        *,
        ttl_s: float | None = 7 * 86400,
        max_entries: int | None = 100_000,
        max_bytes: int | None = 512 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
        close_db: bool = False,
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(inner)
        self.redactor = redactor or default_redactor()
        self.personal = 0
        """Responses not cached because they held personal data."""
        self.db = db
        self.close_db = close_db  # True when this wrapper owns the database (see `registry.wrap`)
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self.hits = 0
        self.misses = 0
        self.errors = 0

    def key(self, req: ChatRequest) -> str:
        return req.cache_key(self.inner.name)

    def _get(self, key: str, req: ChatRequest) -> ChatResponse | None:
        now = self.clock()
        with self.db.engine.begin() as conn:
            row = conn.execute(
                select(chat_cache.c.response, chat_cache.c.created_at).where(chat_cache.c.key == key)
            ).first()
            if row is None:
                return None
            if self.ttl_s is not None and now - row.created_at > self.ttl_s:
                conn.execute(delete(chat_cache).where(chat_cache.c.key == key))
                return None
            conn.execute(update(chat_cache).where(chat_cache.c.key == key).values(last_used=now))
        resp = ChatResponse.model_validate_json(row.response)
        parsed = None
        if req.output_type is not None:
            if resp.parsed is None:
                return None  # stored without structured output: not a hit for a structured request
            parsed = req.output_type.model_validate(resp.parsed)
        return resp.model_copy(update={"cached": True, "parsed": parsed})

    def _put(self, key: str, resp: ChatResponse) -> None:
        blob = resp.model_copy(update={"cached": False}).model_dump_json()
        if self.redactor.find(resp.text) or (resp.parsed is not None and self.redactor.find(blob)):
            self.personal += 1
            return
        now = self.clock()
        values = {
            "model": self.inner.name,
            "response": blob,
            "created_at": now,
            "last_used": now,
            "size_bytes": len(blob.encode()),
        }
        with self.db.engine.begin() as conn:
            conn.execute(delete(chat_cache).where(chat_cache.c.key == key))
            conn.execute(chat_cache.insert().values(key=key, **values))
            self._evict(conn)

    def _evict(self, conn: Connection) -> None:
        if self.ttl_s is not None:
            conn.execute(delete(chat_cache).where(chat_cache.c.created_at < self.clock() - self.ttl_s))
        if self.max_entries is not None:
            keep = (
                select(chat_cache.c.key)
                .order_by(chat_cache.c.last_used.desc(), chat_cache.c.key)
                .limit(self.max_entries)
            )
            conn.execute(delete(chat_cache).where(chat_cache.c.key.not_in(keep.scalar_subquery())))
        if self.max_bytes is not None:
            running = (
                select(
                    chat_cache.c.key,
                    func.sum(chat_cache.c.size_bytes)
                    .over(order_by=(chat_cache.c.last_used.desc(), chat_cache.c.key))
                    .label("cum"),
                )
            ).subquery()
            over = select(running.c.key).where(running.c.cum > self.max_bytes)
            conn.execute(delete(chat_cache).where(chat_cache.c.key.in_(over.scalar_subquery())))

    async def aclose(self) -> None:
        await self.inner.aclose()
        if self.close_db:
            self.db.close()

    def stats(self) -> dict[str, int]:
        with self.db.engine.connect() as conn:
            entries, size = conn.execute(
                select(func.count(), func.coalesce(func.sum(chat_cache.c.size_bytes), 0))
            ).one()
        return {"hits": self.hits, "misses": self.misses, "entries": int(entries), "bytes": int(size)}

    async def request(self, req: ChatRequest) -> ChatResponse:
        key = self.key(req)
        try:
            hit = await asyncio.to_thread(self._get, key, req)
        except SQLAlchemyError as exc:  # a locked or broken cache file is a miss, not a failed call
            self.errors += 1
            log.warning("chat cache read failed (%s): %s", type(exc).__name__, str(exc)[:200])
            hit = None
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        resp = await self.inner.request(req)
        if not resp.cached:
            try:
                await asyncio.to_thread(self._put, key, resp)
            except SQLAlchemyError as exc:
                self.errors += 1
                log.warning("chat cache write failed (%s): %s", type(exc).__name__, str(exc)[:200])
        return resp
