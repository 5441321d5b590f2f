"""External search adapters for the CRAG fallback: SearxNG JSON API, Tavily, another local collection.

Import them from `ragloop.agent.search`, which also holds the circuit breaker, the guarded wrapper
and `make_search_provider`. This module holds the result type, the typed errors and the adapters.

Text that comes back from a search engine is data to be graded and refined, never instructions:
nothing here interprets it beyond cleaning (HTML tags stripped, whitespace collapsed, length capped).
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import importlib.util
import inspect
import json
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import httpx

    from ragloop.config.pipeline import RetrievalConfig
    from ragloop.config.settings import Settings
    from ragloop.retrieval.types import Mode

SNIPPET_MAX_CHARS = 2000
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
TAVILY_BASE = "https://api.tavily.com"
TAVILY_KEY_ENV = ("RAGLOOP_TAVILY_API_KEY", "TAVILY_API_KEY")


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str  # collection results: "collection://NAME/<doc_id>#<chunk_id>"
    snippet: str  # the text the graph refines
    source: str  # provider name
    score: float | None = None
    doc_id: str = ""  # citation id: the url for web results, the doc id for collection results
    chunk_id: str = ""  # web: sha256(url + snippet)[:16]; collection: the chunk id


class SearchError(Exception):
    """A search failed; the message says why (and never carries a credential)."""


class SearchTimeout(SearchError):
    """No complete answer within the time limit."""


class SearchUnavailable(SearchError):
    """The circuit breaker is open: the provider is not called at all."""


class SearchBadResponse(SearchError):
    """The provider answered, but not with the shape it promises."""


class SearchProvider(ABC):
    name: str = "search"

    @abstractmethod
    async def search(self, query: str, k: int = 5) -> list[SearchResult]: ...

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most providers hold nothing
        """Release what the provider holds (an HTTP client, a collection)."""

    def redact(self, text: str) -> str:
        """`text` with any secret the provider holds masked out."""
        return text

    async def __aenter__(self) -> SearchProvider:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


# cleaning ------------------------------------------------------------------------------------
_DROP_BLOCKS = re.compile(r"<(script|style|noscript)\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<!--.*?-->|<[!/?]?[A-Za-z][^<>]*>", re.DOTALL)
_WS = re.compile(r"\s+")


def clean_snippet(text: str, limit: int = SNIPPET_MAX_CHARS) -> str:
    """Tags (and script/style bodies) removed, entities decoded, whitespace collapsed, capped."""
    text = _TAG.sub(" ", _DROP_BLOCKS.sub(" ", text))
    return truncate(_WS.sub(" ", html.unescape(text)).strip(), limit)


def truncate(text: str, limit: int = SNIPPET_MAX_CHARS) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 3 // 4:  # end on a word boundary when one is near
        cut = cut[:space]
    return cut.rstrip() + "…"


def web_chunk_id(url: str, snippet: str) -> str:
    return hashlib.sha256((url + snippet).encode("utf-8")).hexdigest()[:16]


def _field(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SearchBadResponse(f"{where}.{key} is {type(value).__name__}, expected a string")
    return value


def parse_web_results(payload: object, source: str, k: int) -> list[SearchResult]:
    """`{"results": [{title, url, content, score?}, ...]}` to at most `k` cleaned, de-duplicated results.

    A wrong shape raises `SearchBadResponse`; an item without an http(s) url or without text is dropped.
    """
    if not isinstance(payload, dict):
        raise SearchBadResponse(f"expected a JSON object, got {type(payload).__name__}")
    items = payload.get("results")
    if not isinstance(items, list):
        raise SearchBadResponse("'results' is missing or not a list")
    out: list[SearchResult] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"results[{i}]"
        if not isinstance(item, dict):
            raise SearchBadResponse(f"{where} is {type(item).__name__}, expected an object")
        url = _field(item, "url", where).strip()
        title = clean_snippet(_field(item, "title", where), 300)
        snippet = clean_snippet(_field(item, "content", where))
        raw_score = item.get("score")
        if raw_score is not None and (isinstance(raw_score, bool) or not isinstance(raw_score, int | float)):
            raise SearchBadResponse(f"{where}.score is {type(raw_score).__name__}, expected a number")
        if not snippet or urlsplit(url).scheme not in ("http", "https"):
            continue
        chunk_id = web_chunk_id(url, snippet)
        if chunk_id in seen:
            continue
        seen.add(chunk_id)
        score = float(raw_score) if raw_score is not None else None
        out.append(SearchResult(title or url, url, snippet, source, score, doc_id=url, chunk_id=chunk_id))
        if len(out) >= k:
            break
    return out


# HTTP providers -----------------------------------------------------------------------------
def _require_httpx() -> None:
    if importlib.util.find_spec("httpx") is None:
        raise ValueError("external web search needs httpx: pip install 'ragloop[agent]' (or httpx)")


def _check_base_url(base_url: str, provider: str) -> str:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{provider}: base URL must be http(s)://host[:port][/path], got {base_url!r}")
    return base_url.rstrip("/")


class _HTTPProvider(SearchProvider):
    """One shared `httpx.AsyncClient` per instance, created in the first call's event loop.

    Use an instance from one event loop and `aclose()` it there.
    """

    def __init__(self, base_url: str, timeout_s: float) -> None:
        _require_httpx()
        self.base_url = _check_base_url(base_url, self.name)
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                follow_redirects=False,
                headers={"User-Agent": "ragloop", "Accept": "application/json"},
            )
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _request_json(self, method: str, url: str, **kwargs: Any) -> object:
        import httpx

        try:
            async with self._http().stream(method, url, **kwargs) as resp:
                if resp.status_code != 200:
                    raise SearchError(self.redact(f"{self.name}: HTTP {resp.status_code}{self._hint(resp)}"))
                body = bytearray()
                async for part in resp.aiter_bytes():
                    body += part
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise SearchBadResponse(f"{self.name}: response larger than {MAX_RESPONSE_BYTES} bytes")
        except httpx.TimeoutException:
            raise SearchTimeout(f"{self.name}: no answer within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise SearchError(self.redact(f"{self.name}: request failed: {reason}")) from None
        try:
            return json.loads(bytes(body))
        except (ValueError, UnicodeDecodeError):
            raise SearchBadResponse(f"{self.name}: response is not valid JSON") from None

    def _hint(self, resp: httpx.Response) -> str:
        return ""


class SearxNGProvider(_HTTPProvider):
    """`GET {base}/search?q=...&format=json` on a SearxNG (or compatible) instance."""

    name = "searxng"

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 3.0,
        categories: str | None = None,
        language: str | None = None,
    ) -> None:
        super().__init__(base_url, timeout_s)
        self.categories = categories
        self.language = language

    def _hint(self, resp: httpx.Response) -> str:
        return " (is the json format enabled in the SearxNG settings?)" if resp.status_code == 403 else ""

    async def search(self, query: str, k: int = 5) -> list[SearchResult]:
        if k <= 0 or not query.strip():
            return []
        params = {"q": query, "format": "json"}
        if self.categories:
            params["categories"] = self.categories
        if self.language:
            params["language"] = self.language
        payload = await self._request_json("GET", f"{self.base_url}/search", params=params)
        return parse_web_results(payload, self.name, k)


def tavily_key_from_env() -> str | None:
    for var in TAVILY_KEY_ENV:
        value = os.environ.get(var, "").strip()
        if value:
            return value
    return None


class TavilyProvider(_HTTPProvider):
    """`POST {base}/search` on the Tavily API. The key is sent as a bearer token (or in the body
    with `auth="body"`), masked in every message this provider produces, and never logged."""

    name = "tavily"

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str = TAVILY_BASE,
        timeout_s: float = 3.0,
        search_depth: Literal["basic", "advanced"] = "basic",
        auth: Literal["bearer", "body"] = "bearer",
    ) -> None:
        super().__init__(base_url, timeout_s)
        key = api_key or tavily_key_from_env()
        if not key:
            raise ValueError(f"tavily needs an API key: set {' or '.join(TAVILY_KEY_ENV)}")
        self._api_key = key
        self.search_depth = search_depth
        self.auth = auth

    def __repr__(self) -> str:
        return f"TavilyProvider(base_url={self.base_url!r}, api_key='***')"

    def redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    async def search(self, query: str, k: int = 5) -> list[SearchResult]:
        if k <= 0 or not query.strip():
            return []
        body: dict[str, object] = {
            "query": query,
            "max_results": min(k, 20),
            "search_depth": self.search_depth,
        }
        headers = {}
        if self.auth == "body":
            body["api_key"] = self._api_key
        else:
            headers["Authorization"] = f"Bearer {self._api_key}"
        payload = await self._request_json("POST", f"{self.base_url}/search", json=body, headers=headers)
        return parse_web_results(payload, self.name, k)


# another local collection ---------------------------------------------------------------------
SearchFn = Callable[[str, int], Awaitable[list[SearchResult]]] | Callable[[str, int], list[SearchResult]]


class CollectionProvider(SearchProvider):
    """Searches another local collection through `search_fn(query, k)` (sync functions run in a thread)."""

    def __init__(self, name: str, search_fn: SearchFn, *, close_fn: Callable[[], object] | None = None) -> None:
        self.collection = name
        self.name = f"collection:{name}"
        self._search_fn = search_fn
        self._close_fn = close_fn

    @classmethod
    def for_collection(
        cls,
        name: str,
        settings: Settings,
        config: RetrievalConfig | None = None,
        mode: Mode | None = None,
    ) -> CollectionProvider:
        """A provider over `ragloop.retrieval.collection.Collection(name, settings)`.

        The index is opened on the first search, so a collection ingested later is found; one that
        still has no index then fails that search with a `SearchError`.
        """
        from ragloop.retrieval.collection import Collection
        from ragloop.retrieval.retriever import Retriever

        coll = Collection(name, settings)  # CollectionError (a ValueError-like message) for a bad name
        retriever = Retriever(coll, config)
        lock = threading.Lock()  # one retrieval at a time: the retriever memoises per call

        def search_fn(query: str, k: int) -> list[SearchResult]:
            with lock:
                hits = retriever.retrieve(query, k=k, mode=mode)
            return [
                SearchResult(
                    title=h.title or " / ".join(h.heading_path) or h.doc_id,
                    url=f"collection://{name}/{h.doc_id}#{h.chunk_id}",
                    snippet=truncate(h.text),
                    source=f"collection:{name}",
                    score=float(h.score),
                    doc_id=h.doc_id,
                    chunk_id=h.chunk_id,
                )
                for h in hits
                if h.text.strip()
            ]

        def close() -> None:
            with lock:  # not under a retrieval still running after a timeout
                coll.close()

        return cls(name, search_fn, close_fn=close)

    async def search(self, query: str, k: int = 5) -> list[SearchResult]:
        if k <= 0 or not query.strip():
            return []
        try:
            if inspect.iscoroutinefunction(self._search_fn):
                result: object = await self._search_fn(query, k)
            else:
                result = await asyncio.to_thread(self._search_fn, query, k)
                if inspect.isawaitable(result):
                    result = await result
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(result, list) or not all(isinstance(r, SearchResult) for r in result):
            raise SearchBadResponse(f"{self.name}: search function did not return a list of SearchResult")
        return [r for r in result if r.snippet.strip()][:k]

    async def aclose(self) -> None:
        close, self._close_fn = self._close_fn, None
        if close is not None:
            await asyncio.to_thread(close)
