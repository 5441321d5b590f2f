"""The regression alert webhook: where it is configured, how an alert is delivered, what is logged.

**Configuration**, first match wins: the URL a caller passes (`ragloop regress --webhook`), the
stored setting (`service_settings` key `regression_webhook`, set by an admin with
`PUT /v1/regression/webhook` or `ragloop regress webhook set`, shared by every server and CLI on the
database, audited), then the environment (`RAGLOOP_REGRESSION_WEBHOOK_URL`, the service config's
default). An optional shared secret signs each body: `X-Ragloop-Signature: sha256=<hex HMAC of the
body>`, so the receiver can tell a real alert from a forged one.

**Delivery**: a JSON POST (`{"text", "evidence", "sent_at"}`), retried with exponential backoff
(`attempts`, default 3) on a connection error, a timeout, a 5xx or a 429; a 4xx other than 429 is
final (the receiver refused this body: resending it cannot help). A failed delivery is logged and
returned, never raised: the rollback it reports has already happened.

**No secrets in logs, audit entries or API responses**: a webhook URL often *is* a credential
(Slack's and Teams' carry their token in the path, others a `?token=` or user:password@), so only
`redact(url)` (scheme, host and port) is ever logged, audited or returned; the secret never is.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ragloop.store import Store

log = logging.getLogger("ragloop.experiments.alerts")

SETTING_KEY = "regression_webhook"
ENV_VAR = "RAGLOOP_REGRESSION_WEBHOOK_URL"
SIGNATURE_HEADER = "X-Ragloop-Signature"
SET, CLEARED = "alert_webhook_set", "alert_webhook_cleared"


def validate_url(url: str) -> str:
    """The URL stripped; ValueError unless it is http(s) with a host."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the webhook URL must be http:// or https:// with a host")
    return url


def redact(url: str) -> str:
    """What may be shown of a webhook URL: scheme, host and port; the path, query and any user
    info (where tokens live) become `…`."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    hidden = "/…" if (parts.path not in ("", "/") or parts.query or parts.username) else ""
    return f"{parts.scheme}://{host}{port}{hidden}"


@dataclass(frozen=True)
class Webhook:
    url: str
    secret: str | None = None
    source: str = "argument"
    """Where it was configured: argument | setting | environment."""
    timeout_s: float = 5.0
    attempts: int = 3
    backoff_s: float = 0.5

    def public(self) -> dict[str, Any]:
        """What the API and the CLI show: never the URL's path or the secret."""
        return {
            "url": redact(self.url),
            "signed": self.secret is not None,
            "source": self.source,
            "attempts": self.attempts,
            "timeout_s": self.timeout_s,
        }


def stored_webhook(store: Store) -> Webhook | None:
    value = store.settings.get(SETTING_KEY)
    if not value or not value.get("url"):
        return None
    return Webhook(
        str(value["url"]),
        value.get("secret") or None,
        "setting",
        float(value.get("timeout_s", 5.0)),
        int(value.get("attempts", 3)),
    )


def resolve_webhook(store: Store | None, url: str | None = None, env_url: str | None = None) -> Webhook | None:
    """The webhook an alert goes to (the module's order); None: log only."""
    if url:
        return Webhook(url)
    hook = stored_webhook(store) if store is not None else None
    if hook is not None:
        return hook
    return Webhook(env_url, source="environment") if env_url else None


def set_webhook(
    store: Store, url: str, *, secret: str | None = None, attempts: int = 3, timeout_s: float = 5.0, actor: str
) -> Webhook:
    """Store the webhook (audited with the redacted URL only). ValueError on a bad URL or limits."""
    url = validate_url(url)
    if not 1 <= attempts <= 10 or not 0 < timeout_s <= 60:
        raise ValueError("attempts must be in 1..10 and timeout_s in (0, 60]")
    value: dict[str, Any] = {"url": url, "attempts": attempts, "timeout_s": timeout_s}
    if secret:
        value["secret"] = secret
    with store.db.transaction():
        store.settings.set(SETTING_KEY, value, actor=actor)
        store.audit.record(
            SET,
            triggered_by="admin setting: regression alert webhook",
            actor=actor,
            evidence={"url": redact(url), "signed": bool(secret), "attempts": attempts, "timeout_s": timeout_s},
        )
    return Webhook(url, secret or None, "setting", timeout_s, attempts)


def clear_webhook(store: Store, *, actor: str) -> bool:
    with store.db.transaction():
        removed = store.settings.delete(SETTING_KEY)
        if removed:
            store.audit.record(
                CLEARED, triggered_by="admin setting: regression alert webhook", actor=actor, evidence={}
            )
    return removed


@dataclass(frozen=True)
class Delivery:
    delivered: bool
    attempts: int
    status: int | None
    error: str | None
    url: str
    """Redacted."""

    def to_json(self) -> dict[str, Any]:
        return {
            "delivered": self.delivered,
            "attempts": self.attempts,
            "status": self.status,
            "error": self.error,
            "url": self.url,
        }


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _retryable(status: int | None) -> bool:
    return status is None or status == 429 or status >= 500


def deliver(
    hook: Webhook,
    message: str,
    evidence: Mapping[str, Any],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> Delivery:
    """POST the alert, retrying as the module says; never raises."""
    shown = redact(hook.url)
    body = json.dumps(
        {"text": message, "evidence": dict(evidence), "sent_at": datetime.now(UTC).isoformat()}, default=str
    ).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "ragloop-alerts"}
    if hook.secret:
        headers[SIGNATURE_HEADER] = sign(body, hook.secret)
    status: int | None = None
    error: str | None = None
    for attempt in range(1, hook.attempts + 1):
        req = urllib.request.Request(hook.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=hook.timeout_s) as resp:
                status, error = int(resp.status), None
            log.info("regression alert delivered to %s (attempt %d, HTTP %d)", shown, attempt, status)
            return Delivery(True, attempt, status, None, shown)
        except urllib.error.HTTPError as exc:
            status, error = exc.code, f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:  # refused, timed out, DNS; the message may echo the URL
            status, error = None, type(exc).__name__
        log.warning("regression alert to %s failed (attempt %d of %d): %s", shown, attempt, hook.attempts, error)
        if attempt == hook.attempts or not _retryable(status):
            break
        sleep(hook.backoff_s * 2 ** (attempt - 1))
    log.error("regression alert webhook %s failed: %s; the alert is in the log line above", shown, error)
    return Delivery(False, attempt, status, error, shown)
