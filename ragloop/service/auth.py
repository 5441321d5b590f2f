"""Authentication, roles, per-key rate limits, request size limits and log hygiene.

- Clients send `Authorization: Bearer rlk_<key_id>_<secret>`. Keys are verified against their
  sha256 in the store on every request (so a revoked key stops working at once); no key → 401, a
  wrong or revoked key → 401, a user key on an admin route → 403.
- Each key has a token bucket: `rate_limit_per_minute` tokens (the key's own, or the service
  default), refilled continuously; an empty bucket → 429 with `Retry-After` (whole seconds).
- Refused keys are limited per client address (`FailedAuthLimiter`): past `auth_failures_per_minute`
  of them, a request from that address that presents a key gets 429 with `Retry-After` before its
  key is even looked up. Every refusal costs the same (one lookup, one hash comparison: see
  `ApiKeys.verify_api_key`), so its timing does not tell a key id that exists from one that does not.
- Bodies over the limit are refused with 413 before the app reads them: by `Content-Length` when
  sent, else by counting the bytes as they stream in (chunked uploads cannot sneak past).
- Keys never reach the logs: `RedactKeys` masks anything shaped like a key in every log record,
  and the request log names the key by its public id only.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragloop.store import ApiKeyRecord

KEY_PATTERN = re.compile(r"rlk_([0-9a-f]{16})_[A-Za-z0-9_-]+")
BEARER_PATTERN = re.compile(r"(?i)(bearer\s+)\S+")


@dataclass(frozen=True)
class Caller:
    """Who is asking: the key's public id and role (never the key)."""

    key_id: str
    role: str
    rate_limit_per_minute: int | None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @classmethod
    def from_record(cls, rec: ApiKeyRecord) -> Caller:
        return cls(rec.key_id, rec.role, rec.rate_limit_per_minute)


class FailedAuthLimiter:
    """Refused keys per client address: a bucket of `per_minute` failures, refilled evenly (so a
    client that mistyped its key is back within seconds); thread-safe. `retry_after(address)` is
    asked before a key is verified and `failed(address)` after a refusal, so a burst of concurrent
    requests may overshoot by the number already being verified. `per_minute=0` turns it off.
    Behind a reverse proxy every client has the proxy's address unless the server is told to trust
    its forwarded-for header (`uvicorn --proxy-headers --forwarded-allow-ips`)."""

    MAX_ADDRESSES = 100_000
    """Beyond this many tracked addresses, the ones that have refilled (or the quietest half) are dropped."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute < 0:
            raise ValueError("per_minute must be 0 (off) or positive")
        self.per_minute = per_minute
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _tokens(self, address: str, now: float) -> float:
        tokens, last = self._buckets.get(address, (float(self.per_minute), now))
        return min(float(self.per_minute), tokens + (now - last) * self.per_minute / 60.0)

    def retry_after(self, address: str) -> float | None:
        """Seconds until `address` may try a key again; None when it may now."""
        if not self.per_minute:
            return None
        now = self.clock()
        with self._lock:
            tokens = self._tokens(address, now)
        return None if tokens >= 1.0 else (1.0 - tokens) * 60.0 / self.per_minute

    def failed(self, address: str) -> None:
        """Count one refused key from `address`."""
        if not self.per_minute:
            return
        now = self.clock()
        with self._lock:
            self._buckets[address] = (max(0.0, self._tokens(address, now) - 1.0), now)
            if len(self._buckets) > self.MAX_ADDRESSES:
                self._prune(now)

    def _prune(self, now: float) -> None:
        full = [a for a in self._buckets if self._tokens(a, now) >= self.per_minute]
        for a in full:
            del self._buckets[a]
        if len(self._buckets) > self.MAX_ADDRESSES:
            for a, _ in sorted(self._buckets.items(), key=lambda kv: kv[1][1])[: len(self._buckets) // 2]:
                del self._buckets[a]


class RateLimiter:
    """Token buckets per key id, and the limiter of refused keys per address (`failures`); thread-safe."""

    def __init__(
        self, default_per_minute: int, clock: Callable[[], float] = time.monotonic, *, failures_per_minute: int = 0
    ) -> None:
        self.default_per_minute = default_per_minute
        self.clock = clock
        self.failures = FailedAuthLimiter(failures_per_minute, clock)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def hit(self, key_id: str, per_minute: int | None) -> tuple[bool, float, int, int]:
        """(allowed, retry_after_s, limit, remaining) for one request by `key_id`."""
        limit = per_minute or self.default_per_minute
        rate = limit / 60.0
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(key_id, (float(limit), now))
            tokens = min(float(limit), tokens + (now - last) * rate)
            if tokens >= 1.0:
                tokens -= 1.0
                self._buckets[key_id] = (tokens, now)
                return True, 0.0, limit, int(tokens)
            self._buckets[key_id] = (tokens, now)
            return False, (1.0 - tokens) / rate, limit, 0

    def close(self) -> None:
        """Release connections (a shared limiter's)."""

    @staticmethod
    def retry_after_header(seconds: float) -> str:
        return str(max(1, math.ceil(seconds)))


class BodySizeLimit:
    """Pure ASGI middleware: 413 for bodies over `limit_for(scope)` bytes."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[Scope], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _reply(send, 400, "the Content-Length header is not a number")
                    return
                if declared > limit:
                    await _reply(send, 413, _too_large(limit))
                    return
        seen = 0
        started = False
        refused = False

        async def counted_receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # answer now and tell the app the client went away, so it stops reading
                    refused = True
                    if not started:
                        await _reply(send, 413, _too_large(limit))
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except Exception:
            if not refused:
                raise


def _too_large(limit: int) -> str:
    return f"the request body is larger than the {limit:,} byte limit"


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def redact(text: str) -> str:
    text = KEY_PATTERN.sub(lambda m: f"rlk_{m.group(1)}_***", text)
    return BEARER_PATTERN.sub(lambda m: f"{m.group(1)}***", text)


class RedactKeys(logging.Filter):
    """Masks API keys and bearer tokens in log messages and their arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if record.args:
            if isinstance(record.args, dict):
                record.args = {k: _redact_arg(v) for k, v in record.args.items()}
            else:
                record.args = tuple(_redact_arg(a) for a in record.args)
        return True


def _redact_arg(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


def install_log_redaction(*logger_names: str) -> RedactKeys:
    """Attach the filter to the named loggers and to every handler of the root logger; and redact personal
    data (`ragloop.text.pii`) from every record the process makes."""
    from ragloop.text.pii_logging import install_log_redaction as install_pii

    install_pii()
    flt = RedactKeys()
    for name in logger_names or ("ragloop", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx"):
        logging.getLogger(name).addFilter(flt)
    for handler in logging.getLogger().handlers:
        handler.addFilter(flt)
    return flt
