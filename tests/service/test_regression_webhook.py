"""The regression alert webhook over the admin API: set (422 on a bad URL; 403 for a user key),
read back redacted, test-delivered to a real receiver on 127.0.0.1, cleared; the URL's token and
the signing secret never appear in a response."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from ragloop.experiments.alerts import SIGNATURE_HEADER
from ragloop.store import Store
from tests.service.conftest import build_app, make_keys, running

pytestmark = pytest.mark.anyio


@pytest.fixture
def hook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"headers": dict(self.headers), "body": json.loads(body)})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks/secret-token-123", received
    server.shutdown()
    server.server_close()
    thread.join(5)


async def test_set_show_test_and_clear_the_webhook(store: Store, hook: tuple[str, list[dict[str, Any]]]) -> None:
    url, received = hook
    keys = make_keys(store)
    admin, user = keys.h(keys.admin), keys.h(keys.user)
    async with running(build_app(store)) as c:
        assert (await c.get("/v1/regression/webhook", headers=admin)).json() == {"url": None, "source": None}
        assert (await c.post("/v1/regression/webhook/test", headers=admin)).status_code == 409
        assert (await c.put("/v1/regression/webhook", json={"url": url}, headers=user)).status_code == 403
        bad = await c.put("/v1/regression/webhook", json={"url": "file:///etc/passwd"}, headers=admin)
        assert bad.status_code == 422 and "http" in bad.text
        r = await c.put("/v1/regression/webhook", json={"url": url, "secret": "s3cret"}, headers=admin)
        assert r.status_code == 200 and r.json()["source"] == "setting" and r.json()["signed"] is True
        shown = (await c.get("/v1/regression/webhook", headers=admin)).json()
        assert shown["url"] == url.split("/hooks")[0] + "/…"
        t = await c.post("/v1/regression/webhook/test", headers=admin)
        assert t.status_code == 200 and t.json()["delivered"] is True and t.json()["attempts"] == 1
        gone = await c.delete("/v1/regression/webhook", headers=admin)
        assert gone.json()["cleared"] is True and gone.json()["url"] is None
        texts = r.text + json.dumps(shown) + t.text + gone.text
    assert "secret-token-123" not in texts and "s3cret" not in texts
    (post,) = received
    assert post["body"]["evidence"] == {"test": True} and post["headers"][SIGNATURE_HEADER].startswith("sha256=")
