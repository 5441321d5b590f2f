"""The regression alert webhook against a real HTTP receiver on 127.0.0.1: delivery with an HMAC
signature, retries on 5xx and refused connections (not on a 4xx), the stored setting's precedence
over the environment, audit entries and log lines that never carry the URL's token or the secret,
and a regression run that alerts through the stored setting."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from ragloop.experiments.alerts import (
    CLEARED,
    SET,
    SIGNATURE_HEADER,
    Webhook,
    clear_webhook,
    deliver,
    redact,
    resolve_webhook,
    set_webhook,
)
from ragloop.store import Store
from tests.experiments.test_regression_report import _three_runs

TOKEN = "T00000000/B11111111/supersecrettokenpath"
SECRET = "shh-signing-secret"


@dataclass
class Receiver:
    url: str
    statuses: list[int]
    """What to answer, one per request (204 once they run out)."""
    received: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver("", [])

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.received.append({"path": self.path, "headers": dict(self.headers), "raw": body})
            status = state.statuses.pop(0) if state.statuses else 204
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/services/{TOKEN}?token=abc"
    yield state
    server.shutdown()
    server.server_close()
    thread.join(5)


def _no_secrets(text: str) -> None:
    assert "supersecrettokenpath" not in text and SECRET not in text and "token=abc" not in text


def test_a_signed_alert_is_retried_until_delivered_and_nothing_secret_is_logged(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.statuses = [500, 503]
    waits: list[float] = []
    caplog.set_level(logging.INFO, logger="ragloop.experiments.alerts")
    res = deliver(
        Webhook(receiver.url, SECRET, attempts=4), "golden-set regression", {"run_id": "r1"}, sleep=waits.append
    )
    assert res.delivered and res.attempts == 3 and res.status == 204 and waits == [0.5, 1.0]
    assert len(receiver.received) == 3 and receiver.received[-1]["path"].startswith("/services/T0000")
    post = receiver.received[-1]
    body = json.loads(post["raw"])
    assert body["text"] == "golden-set regression" and body["evidence"] == {"run_id": "r1"}
    expected = "sha256=" + hmac.new(SECRET.encode(), post["raw"], hashlib.sha256).hexdigest()
    assert post["headers"][SIGNATURE_HEADER] == expected  # the receiver can verify the body
    assert res.url == redact(receiver.url) == f"http://127.0.0.1:{receiver.url.split(':')[2].split('/')[0]}/…"
    _no_secrets(caplog.text + json.dumps(res.to_json()))


def test_a_client_error_is_final_and_a_dead_receiver_is_retried_then_logged(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.statuses = [400]
    res = deliver(Webhook(receiver.url, attempts=3), "x", {}, sleep=lambda s: None)
    assert not res.delivered and res.attempts == 1 and res.status == 400 and len(receiver.received) == 1
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = deliver(Webhook(f"http://127.0.0.1:{port}/{TOKEN}", attempts=2), "x", {}, sleep=lambda s: None)
    assert not dead.delivered and dead.attempts == 2 and dead.status is None and dead.error
    assert any("failed" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    _no_secrets(caplog.text)


def test_the_stored_setting_wins_over_the_environment_and_is_audited_redacted(store: Store) -> None:
    env = "http://env.example:9000/hook"
    assert resolve_webhook(store, None, env) == Webhook(env, source="environment")
    assert resolve_webhook(store, None, None) is None
    with pytest.raises(ValueError, match="http"):
        set_webhook(store, "ftp://example.com/x", actor="t")
    set_webhook(store, f"https://hooks.example.com/services/{TOKEN}", secret=SECRET, attempts=2, actor="admin")
    hook = resolve_webhook(store, None, env)
    assert hook is not None and (hook.source, hook.secret, hook.attempts) == ("setting", SECRET, 2)
    assert hook.public() == {
        "url": "https://hooks.example.com/…", "signed": True, "source": "setting", "attempts": 2, "timeout_s": 5.0,
    }  # fmt: skip
    arg = resolve_webhook(store, "http://cli.example/x", env)
    assert arg is not None and arg.source == "argument"  # `ragloop regress --webhook` wins
    [audit] = store.audit.timeline(action_type=SET)
    assert audit.actor == "admin" and audit.evidence["url"] == "https://hooks.example.com/…"
    _no_secrets(json.dumps(audit.evidence))
    assert clear_webhook(store, actor="admin") and not clear_webhook(store, actor="admin")
    assert resolve_webhook(store, None, env) == Webhook(env, source="environment")
    assert len(store.audit.timeline(action_type=CLEARED)) == 1


def test_a_regression_alerts_through_the_stored_webhook(store: Store, tmp_path: Path, receiver: Receiver) -> None:
    set_webhook(store, receiver.url, secret=SECRET, actor="admin")
    runs = _three_runs(store, tmp_path)  # no webhook argument: the stored setting applies
    assert runs[2].rollback_triggered
    (post,) = receiver.received
    assert json.loads(post["raw"])["evidence"]["run_id"] == runs[2].run_id and SIGNATURE_HEADER in post["headers"]
