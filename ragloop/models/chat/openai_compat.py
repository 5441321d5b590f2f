"""`openai:` one client for every OpenAI-compatible endpoint (OpenAI, Groq, vLLM, Ollama,
LM Studio, llama.cpp server, LiteLLM).

Base URL and key come from the arguments, else `RAGLOOP_OPENAI_BASE_URL` and
`RAGLOOP_OPENAI_API_KEY` / `OPENAI_API_KEY`. The official SDK runs with `max_retries=0`: the
`Retrying` wrapper owns retries, and every SDK failure is mapped onto our typed errors (429 ->
`RateLimitedError` with `Retry-After`, quota -> `QuotaExhaustedError`, 5xx/connection ->
`TransientModelError`, timeouts -> `ModelTimeoutError`, other 4xx -> `ModelRequestError`).

Structured output asks for a JSON-schema response format first; when the endpoint answers 400
about the response format, this instance falls back to JSON mode, then to instructions plus
parsing, and remembers the mode that works.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from ragloop.models.chat import structured, testing, wire
from ragloop.models.chat.base import ChatModel, ChatRequest, ChatResponse
from ragloop.models.errors import (
    ModelError,
    ModelRequestError,
    ModelTimeoutError,
    ModelUnavailableError,
    QuotaExhaustedError,
    RateLimitedError,
    TransientModelError,
)

StructuredMode = Literal["json_schema", "json_object", "text"]
_FALLBACK: dict[str, StructuredMode] = {"json_schema": "json_object", "json_object": "text"}
_QUOTA_CODES = {"insufficient_quota", "quota_exceeded", "billing_hard_limit_reached", "billing_not_active"}


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` as seconds or an HTTP date."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    raw_ms = lower.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = lower.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_fields(body: object) -> tuple[str, str]:
    """(code-or-type, message) from an error body, whatever its nesting."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            code = str(inner.get("code") or inner.get("type") or "")
            return code, str(inner.get("message") or "")
        return "", str(inner)
    return "", str(body or "")


def is_quota_error(status: int | None, body: object, message: str = "") -> bool:
    if status == 402:
        return True
    code, msg = _error_fields(body)
    text = f"{msg} {message}".lower()
    return code in _QUOTA_CODES or "billing" in text or ("quota" in text and "rate limit" not in text)


def default_base_url() -> str | None:
    return os.environ.get("RAGLOOP_OPENAI_BASE_URL") or None


def default_api_key() -> str | None:
    return os.environ.get("RAGLOOP_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


class OpenAIChatModel(ChatModel):
    """`OpenAIChatModel("gpt-4o-mini")` is registry name `openai:gpt-4o-mini`."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        structured_mode: StructuredMode = "json_schema",
        name: str | None = None,
    ) -> None:
        self.model = model
        self.name = name or f"openai:{model}"
        self.base_url = base_url or default_base_url()
        self.api_key = api_key or default_api_key()
        self.timeout_s = timeout_s
        self.structured_mode: StructuredMode = structured_mode
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def _client_for_loop(self) -> Any:
        testing.ensure_real_calls_allowed(self.name)
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is loop:
            return self._client
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ModelUnavailableError("the openai backend needs the SDK: pip install openai") from exc
        key = self.api_key
        if key is None:
            if self.base_url is None:
                raise ModelUnavailableError(
                    f"{self.name}: no API key: set RAGLOOP_OPENAI_API_KEY (or OPENAI_API_KEY), and "
                    "RAGLOOP_OPENAI_BASE_URL for endpoints other than OpenAI"
                )
            key = "unused"  # keyless local endpoints (Ollama, llama.cpp) still need a non-empty value
        # A client is bound to the loop it first ran on; a new loop (another run_sync) gets its own.
        self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=self.timeout_s)
        self._client_loop = loop
        return self._client

    def _kwargs(self, req: ChatRequest, mode: StructuredMode | None) -> dict[str, Any]:
        schema = req.json_schema()
        instruction = None
        if schema is not None and mode in ("json_object", "text"):
            instruction = structured.schema_instruction(schema)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": wire.messages_payload(req, instruction),
            "timeout": req.timeout_s or self.timeout_s,
            **wire.sampling_payload(req),
        }
        if schema is not None and req.output_type is not None and mode == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": req.output_type.__name__[:64], "schema": schema, "strict": False},
            }
        elif schema is not None and mode == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        return kwargs

    def _map_error(self, exc: Exception) -> ModelError:
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return ModelTimeoutError(f"{self.name}: timed out")
        if isinstance(exc, openai.APIConnectionError):
            return TransientModelError(f"{self.name}: connection failed: {exc}")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            retry_after = parse_retry_after(dict(exc.response.headers))
            msg = f"{self.name}: HTTP {status}: {exc.message}"
            if status in (402, 429) and is_quota_error(status, exc.body, exc.message):
                return QuotaExhaustedError(msg)
            if status == 429:
                return RateLimitedError(msg, status=status, retry_after=retry_after)
            if status >= 500 or status in (408, 409):
                return TransientModelError(msg, status=status, retry_after=retry_after)
            return ModelRequestError(msg, status=status)
        return ModelError(f"{self.name}: {exc}")

    @staticmethod
    def _format_unsupported(exc: Exception) -> bool:
        import openai

        if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (400, 422):
            return False
        text = f"{exc.message} {exc.body}".lower()
        return any(w in text for w in ("response_format", "json_schema", "json_object", "structured"))

    async def _raw(self, req: ChatRequest) -> ChatResponse:
        import openai

        client = self._client_for_loop()
        while True:
            mode = self.structured_mode if req.output_type is not None else None
            start = time.perf_counter()
            try:
                resp = await client.chat.completions.create(**self._kwargs(req, mode))
            except openai.OpenAIError as exc:
                if mode is not None and mode in _FALLBACK and self._format_unsupported(exc):
                    self.structured_mode = _FALLBACK[mode]
                    continue
                raise self._map_error(exc) from exc
            latency = (time.perf_counter() - start) * 1000
            data = resp.model_dump(mode="json", warnings=False)
            return wire.response_from_dict(data, model=self.name, latency_ms=latency)

    async def request(self, req: ChatRequest) -> ChatResponse:
        return await structured.complete(self._raw, req, self.name)

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        import openai

        client = self._client_for_loop()
        mode = self.structured_mode if req.output_type is not None else None
        try:
            chunks = await client.chat.completions.create(**self._kwargs(req, mode), stream=True)
            async with chunks:
                async for chunk in chunks:
                    text = wire.delta_text(chunk.model_dump(mode="json", warnings=False))
                    if text:
                        yield text
        except openai.OpenAIError as exc:
            raise self._map_error(exc) from exc

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client, self._client_loop = self._client, None, None
            await client.close()
