"""A real loopback HTTP server that answers OpenAI chat-completion requests from a script.

Each POST takes the next scripted reply (status, headers, body, optional delay); when the script
runs out it answers 200 with a fixed completion. Every request is recorded with its arrival
time, so tests can check what the client really sent and when (backoff, Retry-After, limits).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict -> JSON; None -> a default completion
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def completion(text: str = "hello", prompt_tokens: int = 7, completion_tokens: int = 3) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error(status_message: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": status_message, "type": code or "error", "code": code}}


@dataclass
class Seen:
    t: float
    path: str
    body: dict[str, Any]
    headers: dict[str, str]  # lower-case names


class ScriptedServer:
    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.seen: list[Seen] = []
        self.default = Reply()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length) if length else b"{}"
                with outer._lock:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    outer.seen.append(Seen(time.monotonic(), self.path, json.loads(raw), headers))
                    reply = outer.script.pop(0) if outer.script else outer.default
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                payload = json.dumps(reply.body if reply.body is not None else completion()).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> ScriptedServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def gaps(self) -> list[float]:
        return [b.t - a.t for a, b in zip(self.seen, self.seen[1:], strict=False)]
