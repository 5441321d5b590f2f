"""A real HTTP server on 127.0.0.1 (port 0) in a thread that answers on a script: fine, slow, failing,
malformed. It counts hits and records every request, so tests can tell whether a call reached it."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b"{}"
    delay_s: float = 0.0  # sleep before answering (interrupted when the server stops)
    content_type: str = "application/json"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)


def as_json(payload: object, status: int = 200, delay_s: float = 0.0) -> Reply:
    return Reply(status, json.dumps(payload).encode(), delay_s)


def searxng_results(*items: dict[str, object]) -> Reply:
    return as_json({"query": "q", "number_of_results": len(items), "results": list(items)})


def tavily_results(*items: dict[str, object]) -> Reply:
    return as_json({"query": "q", "response_time": 0.1, "images": [], "results": list(items)})


FINE_SEARXNG = searxng_results(
    {"title": "Walk", "url": "https://example.org/walk", "content": "os.walk walks a tree.", "score": 1.5},
    {"title": "List", "url": "https://example.org/list", "content": "os.listdir lists entries."},
)
FINE_TAVILY = tavily_results(
    {"title": "Walk", "url": "https://example.org/walk", "content": "os.walk walks a tree.", "score": 0.9},
)


def slow(delay_s: float, then: Reply = FINE_SEARXNG) -> Reply:
    return Reply(then.status, then.body, delay_s, then.content_type)


def failing(status: int = 500) -> Reply:
    return Reply(status, b'{"detail": "internal error"}')


MALFORMED = Reply(200, b'{"results": [{"title": "cut off', content_type="application/json")


@dataclass
class SearchServer:
    """`script(*replies)` queues replies, one per request; when the queue is empty `default` answers."""

    default: Reply = FINE_SEARXNG
    hits: int = 0
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def _next(self, rec: Recorded) -> Reply:
        with self._lock:
            self.hits += 1
            self.requests.append(rec)
            return self._queue.popleft() if self._queue else self.default

    def start(self) -> SearchServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                rec = Recorded(self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), body)
                reply = server._next(rec)
                if reply.delay_s and server._stopping.wait(reply.delay_s):
                    return
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    self.close_connection = True

            do_GET = _serve
            do_POST = _serve

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

        return Handler


@contextmanager
def search_server(default: Reply = FINE_SEARXNG) -> Iterator[SearchServer]:
    server = SearchServer(default).start()
    try:
        yield server
    finally:
        server.stop()
