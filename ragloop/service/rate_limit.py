"""Per-key rate limits shared by every server of a fleet: one token bucket per key in Redis.

`auth.RateLimiter` keeps its buckets in the process: behind a load balancer with N servers a key
gets N times its limit. With `RAGLOOP_REDIS_URL` set, `RedisRateLimiter` keeps the bucket in Redis
instead, and one Lua script reads, refills, takes a token and writes it back atomically (no two
servers can take the same last token), on Redis's own clock (`TIME`, so the servers' clocks never
disagree about the refill). The bucket is the in-process one's: `limit` tokens, refilled evenly
over a minute, so a key's limit means the same with or without Redis. A bucket expires once it
would be full again (60 s idle), so Redis holds only the keys in use.

When Redis fails the request is limited by the in-process bucket instead (and the error logged at
most once a minute): a Redis outage leaves every server enforcing the limit on its own, never
refusing or waving through everything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ragloop.service.auth import RateLimiter

log = logging.getLogger("ragloop.service.rate_limit")

DEFAULT_PREFIX = "ragloop:ratelimit"
WARN_EVERY_S = 60.0

# KEYS[1] bucket; ARGV[1] limit (tokens per minute). Returns {allowed (0/1), tokens left (string)}.
TOKEN_BUCKET = """
local limit = tonumber(ARGV[1])
local rate = limit / 60.0
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1])
local ts = tonumber(b[2])
if tokens == nil or ts == nil then
  tokens = limit
  ts = now
end
tokens = math.min(limit, tokens + math.max(0, now - ts) * rate)
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('EXPIRE', KEYS[1], 61)
return {allowed, tostring(tokens)}
"""


class RedisRateLimiter(RateLimiter):
    """`RateLimiter` whose per-key buckets live in Redis (the refused-keys limiter per address stays
    in process: it guards one server's verification work)."""

    def __init__(
        self,
        client: Any,
        default_per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        *,
        failures_per_minute: int = 0,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        super().__init__(default_per_minute, clock, failures_per_minute=failures_per_minute)
        self.client = client
        self.prefix = prefix
        self._script = client.register_script(TOKEN_BUCKET)
        self.errors = 0
        """Requests limited in process because Redis failed (a health signal)."""
        self._warned = -1e18

    @classmethod
    def from_url(cls, url: str, default_per_minute: int, **kwargs: Any) -> RedisRateLimiter:
        import redis  # the `redis` extra

        client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        return cls(client, default_per_minute, **kwargs)

    def hit(self, key_id: str, per_minute: int | None) -> tuple[bool, float, int, int]:
        limit = per_minute or self.default_per_minute
        try:
            allowed, left = self._script(keys=[f"{self.prefix}:{key_id}"], args=[limit])
            tokens = float(left)
        except Exception as exc:  # Redis down: this server's own bucket still limits
            self.errors += 1
            now = self.clock()
            if now - self._warned >= WARN_EVERY_S:
                self._warned = now
                log.warning("shared rate limit unavailable (%s: %s); limiting in process", type(exc).__name__, exc)
            return super().hit(key_id, per_minute)
        if int(allowed):
            return True, 0.0, limit, int(tokens)
        return False, (1.0 - tokens) * 60.0 / limit, limit, 0

    def close(self) -> None:
        self.client.close()


def make_rate_limiter(redis_url: str | None, default_per_minute: int, *, failures_per_minute: int = 0) -> RateLimiter:
    """Buckets in Redis when `RAGLOOP_REDIS_URL` is set, in this process otherwise."""
    if redis_url:
        return RedisRateLimiter.from_url(redis_url, default_per_minute, failures_per_minute=failures_per_minute)
    return RateLimiter(default_per_minute, failures_per_minute=failures_per_minute)
