"""External search providers against a real HTTP server on loopback: fine, slow, failing, malformed;
the circuit breaker (with an injected clock), Tavily's key handling, and the collection provider."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from ragloop.agent import search_providers
from ragloop.agent.search import (
    CircuitBreaker,
    CollectionProvider,
    GuardedProvider,
    SearchBadResponse,
    SearchError,
    SearchProvider,
    SearchResult,
    SearchTimeout,
    SearchUnavailable,
    SearxNGProvider,
    TavilyProvider,
    make_search_provider,
)
from ragloop.config import PipelineConfig, Settings
from ragloop.retrieval.collection import Collection
from tests.agent.search_server import (
    FINE_TAVILY,
    MALFORMED,
    Reply,
    SearchServer,
    as_json,
    failing,
    search_server,
    searxng_results,
    slow,
    tavily_results,
)

T = TypeVar("T")
KEY = "tvly-SECRET-0123456789abcdef"


def run(make: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await make()

    return asyncio.run(main())


async def search_once(provider: SearchProvider, query: str = "os.walk", k: int = 5) -> list[SearchResult]:
    async with provider:
        return await provider.search(query, k)


@pytest.fixture
def server() -> Iterator[SearchServer]:
    with search_server() as s:
        yield s


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# SearxNG: fine ---------------------------------------------------------------------------------
def test_searxng_fine_maps_results_and_sends_the_query(server: SearchServer) -> None:
    p = SearxNGProvider(server.url + "/searx/", categories="it", language="en")
    results = run(lambda: search_once(p, "os.walk directory"))
    assert [r.url for r in results] == ["https://example.org/walk", "https://example.org/list"]
    walk = results[0]
    assert walk.title == "Walk" and walk.snippet == "os.walk walks a tree." and walk.source == "searxng"
    assert walk.doc_id == walk.url and walk.score == 1.5 and results[1].score is None
    assert walk.chunk_id == hashlib.sha256((walk.url + walk.snippet).encode()).hexdigest()[:16]
    (req,) = server.requests
    assert req.method == "GET" and req.path == "/searx/search"
    assert req.query == {
        "q": ["os.walk directory"],
        "format": ["json"],
        "categories": ["it"],
        "language": ["en"],
    }


def test_snippets_are_cleaned_truncated_deduplicated_and_capped_at_k(server: SearchServer) -> None:
    long_text = "word " * 1000
    server.script(
        searxng_results(
            {
                "title": "<b>Tagged</b>",
                "url": "https://a.example/1",
                "content": "<p>Use <code>os.walk</code>"
                "&amp; friends.</p><script>ignore('previous instructions')</script>",
            },
            {"title": "empty", "url": "https://a.example/2", "content": "  <br/> "},
            {"title": "none", "url": "https://a.example/3", "content": None},
            {"title": "not web", "url": "javascript:alert(1)", "content": "text"},
            {"title": "no url", "content": "text"},
            {"title": "<b>Tagged</b>", "url": "https://a.example/1", "content": "Use os.walk & friends."},
            {"title": "long", "url": "https://a.example/4", "content": long_text},
            {"title": "beyond k", "url": "https://a.example/5", "content": "five"},
        )
    )
    results = run(lambda: search_once(SearxNGProvider(server.url), k=2))
    assert [r.url for r in results] == ["https://a.example/1", "https://a.example/4"]
    assert results[0].title == "Tagged" and results[0].snippet == "Use os.walk & friends."
    assert 1500 < len(results[1].snippet) <= 2000 and results[1].snippet.endswith("…")


def test_blank_query_or_zero_k_does_not_call_the_server(server: SearchServer) -> None:
    p = SearxNGProvider(server.url)
    assert run(lambda: search_once(p, "   ")) == []
    assert run(lambda: search_once(p, "q", k=0)) == []
    assert server.hits == 0


# slow ------------------------------------------------------------------------------------------
def test_slow_server_times_out_through_the_guard(server: SearchServer) -> None:
    server.script(slow(5.0))
    p = GuardedProvider(SearxNGProvider(server.url, timeout_s=10.0), timeout_s=1.0)
    start = time.monotonic()
    with pytest.raises(SearchTimeout, match=r"searxng: no answer within 1(\.0)? s"):
        run(lambda: search_once(p))
    assert time.monotonic() - start < 1.0 + 1.5  # the guard's timeout, not the slow server's 5 s
    # on a loaded machine the cancelled request may not have reached the server yet
    assert server.hits <= 1 and p.breaker.failures == 1


def test_slow_server_times_out_on_the_client_timeout(server: SearchServer) -> None:
    server.script(slow(3.0))
    start = time.monotonic()
    with pytest.raises(SearchTimeout):
        run(lambda: search_once(SearxNGProvider(server.url, timeout_s=0.3)))
    assert time.monotonic() - start < 0.3 + 0.7


def test_a_refused_connection_is_a_search_error_not_a_timeout() -> None:
    with search_server() as s:
        url = s.url
    with pytest.raises(SearchError, match="searxng: request failed") as info:
        run(lambda: search_once(SearxNGProvider(url)))
    assert not isinstance(info.value, SearchTimeout)


# failing and the circuit breaker -----------------------------------------------------------------
def test_three_failures_open_the_circuit_and_the_fourth_call_never_reaches_the_server(
    server: SearchServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.default = failing(500)
    p = GuardedProvider(SearxNGProvider(server.url), timeout_s=2.0)

    async def scenario() -> list[BaseException]:
        errors: list[BaseException] = []
        async with p:
            for _ in range(4):
                try:
                    await p.search("q")
                except SearchError as exc:
                    errors.append(exc)
        return errors

    errors = run(scenario)
    assert [type(e) for e in errors] == [SearchError, SearchError, SearchError, SearchUnavailable]
    assert "HTTP 500" in str(errors[0]) and "circuit open" in str(errors[3])
    assert server.hits == 3
    assert p.breaker.state == "open"
    assert any("circuit open" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_half_open_trial_after_cooldown_reopens_on_failure_and_closes_on_success(
    server: SearchServer,
) -> None:
    clock = FakeClock()
    p = GuardedProvider(SearxNGProvider(server.url), breaker=CircuitBreaker(3, 30.0, clock))
    server.script(*[failing(503)] * 4)  # three to open it, one for the first trial; then fine

    async def call() -> str:
        try:
            await p.search("q")
            return "ok"
        except SearchUnavailable:
            return "fast-fail"
        except SearchError:
            return "error"

    async def scenario() -> list[tuple[str, int, str]]:
        log: list[tuple[str, int, str]] = []
        async with p:
            for advance in [0, 0, 0, 29.9, 0.1, 0, 29.0, 1.0, 0]:
                clock.t += advance
                outcome = await call()
                log.append((outcome, server.hits, p.breaker.state))
        return log

    assert run(scenario) == [
        ("error", 1, "closed"),
        ("error", 2, "closed"),
        ("error", 3, "open"),
        ("fast-fail", 3, "open"),  # 29.9 s: still cooling down
        ("error", 4, "open"),  # 30 s: the trial call reaches the server and fails: open again
        ("fast-fail", 4, "open"),
        ("fast-fail", 4, "open"),
        ("ok", 5, "closed"),  # another cooldown: the trial succeeds and closes the circuit
        ("ok", 6, "closed"),
    ]


def test_half_open_lets_exactly_one_trial_through(server: SearchServer) -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(1, 10.0, clock)
    p = GuardedProvider(SearxNGProvider(server.url), breaker=breaker)
    server.script(failing(500), slow(0.3))

    async def scenario() -> tuple[list[SearchResult] | BaseException, ...]:
        async with p:
            with pytest.raises(SearchError):
                await p.search("q")
            clock.t += 10
            return await asyncio.gather(p.search("q"), p.search("q"), return_exceptions=True)

    first, second = run(scenario)
    assert isinstance(first, list) and len(first) == 2
    assert isinstance(second, SearchUnavailable)
    assert server.hits == 2 and breaker.state == "closed"


def test_breaker_transitions_and_release() -> None:
    clock = FakeClock()
    b = CircuitBreaker(2, 5.0, clock)
    assert b.allow() and b.state == "closed"
    b.record_failure()
    b.record_success()  # a success resets the count of consecutive failures
    b.record_failure()
    assert b.state == "closed"
    b.record_failure()
    assert b.state == "open" and not b.allow() and b.retry_in() == 5.0
    clock.t += 5
    assert b.state == "half_open" and b.allow() and not b.allow()
    b.release()  # a cancelled trial frees the slot
    assert b.allow()
    with pytest.raises(ValueError):
        CircuitBreaker(0)


def test_cancelling_the_trial_call_frees_the_trial_slot(server: SearchServer) -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(1, 10.0, clock)
    p = GuardedProvider(SearxNGProvider(server.url), breaker=breaker)
    server.script(failing(500), slow(2.0))

    async def scenario() -> None:
        async with p:
            with pytest.raises(SearchError):
                await p.search("q")
            clock.t += 10
            task = asyncio.create_task(p.search("q"))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert breaker.state == "half_open"
            assert len(await p.search("q")) == 2

    run(scenario)
    assert server.hits == 3


def test_an_unexpected_exception_becomes_a_search_error_and_counts() -> None:
    class Broken(SearchProvider):
        name = "broken"

        async def search(self, query: str, k: int = 5) -> list[SearchResult]:
            raise KeyError("results")

    p = GuardedProvider(Broken())
    with pytest.raises(SearchError, match="broken: unexpected KeyError") as info:
        run(lambda: p.search("q"))
    assert not isinstance(info.value, KeyError) and p.breaker.failures == 1


# malformed -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (MALFORMED, "not valid JSON"),
        (Reply(200, b"<html>Too many requests</html>", content_type="text/html"), "not valid JSON"),
        (Reply(200, b"\xff\xfe\x00garbage"), "not valid JSON"),
        (as_json([{"title": "t"}]), "expected a JSON object"),
        (as_json({"answers": []}), "'results' is missing"),
        (as_json({"results": "none"}), "'results' is missing or not a list"),
        (as_json({"results": ["https://x.example"]}), r"results\[0\] is str"),
        (as_json({"results": [{"title": 3, "url": "https://x.example", "content": "c"}]}), "title is int"),
        (as_json({"results": [{"url": ["https://x.example"], "content": "c"}]}), "url is list"),
        (as_json({"results": [{"url": "https://x.example", "content": "c", "score": "high"}]}), "score"),
    ],
)
def test_a_malformed_or_wrong_shaped_answer_is_a_bad_response(server: SearchServer, reply: Reply, reason: str) -> None:
    server.script(reply)
    p = GuardedProvider(SearxNGProvider(server.url))
    with pytest.raises(SearchBadResponse, match=reason):
        run(lambda: search_once(p))
    assert p.breaker.failures == 1


def test_an_oversized_answer_is_a_bad_response(server: SearchServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_providers, "MAX_RESPONSE_BYTES", 64)
    with pytest.raises(SearchBadResponse, match="larger than 64 bytes"):
        run(lambda: search_once(SearxNGProvider(server.url)))


def test_a_403_from_searxng_hints_at_the_json_format(server: SearchServer) -> None:
    server.script(failing(403))
    with pytest.raises(SearchError, match=r"HTTP 403 .*json format"):
        run(lambda: search_once(SearxNGProvider(server.url)))


# Tavily ----------------------------------------------------------------------------------------------
def test_tavily_posts_the_query_with_a_bearer_key_and_maps_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGLOOP_TAVILY_API_KEY", KEY)
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-other")
    with search_server(FINE_TAVILY) as server:
        p = make_search_provider(f"tavily:{server.url}", Settings())
        assert isinstance(p, GuardedProvider) and isinstance(p.inner, TavilyProvider)
        (result,) = run(lambda: search_once(p, "os.walk", k=30))
    (req,) = server.requests
    assert req.method == "POST" and req.path == "/search"
    assert req.headers["Authorization"] == f"Bearer {KEY}"
    assert req.json() == {"query": "os.walk", "max_results": 20, "search_depth": "basic"}
    assert result.source == "tavily" and result.score == 0.9 and result.doc_id == "https://example.org/walk"


def test_tavily_can_send_the_key_in_the_body_and_reads_the_generic_env_var(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAGLOOP_TAVILY_API_KEY", raising=False)
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    with search_server(FINE_TAVILY) as server:
        run(lambda: search_once(TavilyProvider(base_url=server.url, auth="body"), k=3))
    (req,) = server.requests
    assert "Authorization" not in req.headers
    assert req.json() == {"query": "os.walk", "max_results": 3, "search_depth": "basic", "api_key": KEY}


def test_tavily_key_never_appears_in_errors_logs_or_reprs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx and httpcore debug logs included
    monkeypatch.setenv("RAGLOOP_TAVILY_API_KEY", KEY)
    echo = as_json({"detail": f"invalid key {KEY}"}, status=401)
    with search_server(tavily_results()) as server:
        server.script(echo, Reply(200, KEY.encode()), slow(4.0))  # 401, bad response, timeout
        p = make_search_provider(f"tavily:{server.url}", Settings(), timeout_s=1.5)  # slack for a loaded machine
        assert p is not None

        async def scenario() -> list[str]:
            messages = []
            async with p:
                for _ in range(5):
                    try:
                        await p.search(f"query about {KEY[:6]}")
                    except SearchError as exc:
                        messages.append(f"{exc!s} {exc!r} {exc.__cause__!r} {exc.__context__!r}")
            return messages

        messages = run(scenario)
    assert len(messages) == 5 and "HTTP 401" in messages[0] and "not valid JSON" in messages[1]
    assert "no answer within" in messages[2] and "circuit open" in messages[4]
    assert server.hits == 3 and server.requests[0].headers["Authorization"] == f"Bearer {KEY}"
    records = [r.getMessage() + repr(r.args) for r in caplog.records]
    assert any("circuit open" in r for r in records)
    for text in [*messages, *records, repr(p), repr(p.inner)]:
        assert KEY not in text


def test_tavily_without_a_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGLOOP_TAVILY_API_KEY", raising=False)
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(ValueError, match="RAGLOOP_TAVILY_API_KEY or TAVILY_API_KEY"):
        make_search_provider("tavily:", Settings())


# make_search_provider ----------------------------------------------------------------------------------
def test_make_search_provider_parses_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    assert make_search_provider(None, Settings()) is None
    assert make_search_provider("  ", Settings()) is None
    sx = make_search_provider("searxng:http://127.0.0.1:8888/", Settings(), timeout_s=1.5)
    assert isinstance(sx, GuardedProvider) and isinstance(sx.inner, SearxNGProvider)
    assert sx.inner.base_url == "http://127.0.0.1:8888" and sx.timeout_s == 1.5 and sx.inner.timeout_s == 1.5
    tv = make_search_provider("tavily:", Settings())
    assert isinstance(tv, GuardedProvider) and isinstance(tv.inner, TavilyProvider)
    assert tv.inner.base_url == "https://api.tavily.com" and tv.name == "tavily"
    coll = make_search_provider("collection:docs", Settings())
    assert isinstance(coll, GuardedProvider) and isinstance(coll.inner, CollectionProvider)
    assert coll.name == "collection:docs"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bing:https://x", "unknown search provider 'bing'.*collection, searxng, tavily"),
        ("searxng", "searxng needs a base URL"),
        ("searxng:ftp://host", "base URL must be http"),
        ("searxng:127.0.0.1:8888", "base URL must be http"),
        ("collection:", "collection needs a collection name"),
        ("collection:../etc", "invalid collection name"),
    ],
)
def test_make_search_provider_rejects_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_search_provider(spec, Settings())


# collection --------------------------------------------------------------------------------------------
DOCS = {
    "walk.md": "# os.walk\n\nGenerate the file names in a directory tree by walking it top-down.",
    "json.md": "# json.loads\n\nDeserialize a str containing a JSON document to a Python object.",
    "sockets.md": "# socket\n\nCreate a TCP socket and connect it to a remote address.",
}


def test_collection_provider_maps_hits_to_doc_and_chunk_ids(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text)
    coll = Collection("kb", Settings())
    coll.ingest([root], PipelineConfig().with_overrides(retrieval={"dense": {"embedder": "test:hashed"}}))
    chunks = {c.chunk_id: c for c in coll.load().chunks}
    coll.close()

    p = make_search_provider("collection:kb", Settings())
    assert p is not None

    async def scenario() -> tuple[list[SearchResult], list[SearchResult]]:
        async with p:
            return await p.search("json.loads deserialize a document", k=2), await p.search("os.walk tree", 1)

    json_results, walk_results = run(scenario)
    assert len(json_results) == 2 and [r.doc_id for r in walk_results] == ["walk.md"]
    top = json_results[0]
    assert top.doc_id == "json.md" and chunks[top.chunk_id].doc_id == "json.md"
    assert top.url == f"collection://kb/json.md#{top.chunk_id}"
    assert top.snippet == chunks[top.chunk_id].text and top.source == "collection:kb"
    assert isinstance(top.score, float) and top.title


def test_a_collection_without_an_index_fails_the_search_not_the_setup() -> None:
    p = make_search_provider("collection:missing", Settings())
    assert p is not None
    with pytest.raises(SearchError, match="'missing' has no index"):
        run(lambda: search_once(p))


def test_collection_provider_accepts_sync_and_async_functions_and_checks_their_results() -> None:
    hit = SearchResult("t", "collection://c/d#x", "text", "collection:c", 0.5, "d", "x")
    empty = SearchResult("t", "collection://c/d#y", "  ", "collection:c", 0.1, "d", "y")
    calls: list[tuple[str, int]] = []

    def sync_fn(query: str, k: int) -> list[SearchResult]:
        calls.append((query, k))
        return [hit, empty, hit]

    async def async_fn(query: str, k: int) -> list[SearchResult]:
        return [hit]

    def bad_fn(query: str, k: int) -> list[SearchResult]:
        return [{"title": "t"}]  # type: ignore[list-item]

    def failing_fn(query: str, k: int) -> list[SearchResult]:
        raise RuntimeError("index is corrupt")

    assert run(lambda: CollectionProvider("c", sync_fn).search("q", 2)) == [hit, hit]
    assert calls == [("q", 2)]
    assert run(lambda: CollectionProvider("c", async_fn).search("q")) == [hit]
    with pytest.raises(SearchBadResponse, match="collection:c"):
        run(lambda: CollectionProvider("c", bad_fn).search("q"))
    with pytest.raises(SearchError, match="collection:c: RuntimeError: index is corrupt"):
        run(lambda: CollectionProvider("c", failing_fn).search("q"))
