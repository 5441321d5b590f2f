"""`local:` in-process llama.cpp through xllamacpp.

The model file is verified (`gguf.ensure_model`) before it is loaded, and each model is loaded
once per process (a module-level cache under a lock); all `LocalChatModel` instances of a name
share it. xllamacpp's `Server` also starts llama.cpp's own OpenAI-compatible HTTP server on
127.0.0.1 (a free port); we give it a random API key so nothing else on the machine can use it,
and `load_local` exposes address and key (tests drive the `openai:` backend against it).

Calls block in C++, so they run in worker threads; streaming passes the server's chunks from
its callback thread to the event loop through a queue, and stops generation when the consumer
stops reading.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragloop.config.settings import Settings
from ragloop.models.chat import structured, testing, wire
from ragloop.models.chat.base import ChatModel, ChatRequest, ChatResponse
from ragloop.models.chat.gguf import ensure_model, get_spec
from ragloop.models.errors import ModelRequestError, ModelTimeoutError, ModelUnavailableError

DEFAULT_MAX_TOKENS = 1024


@dataclass(frozen=True)
class LoadedModel:
    name: str
    server: Any  # xllamacpp.Server
    path: Path
    api_key: str
    threads: int
    n_ctx: int
    load_s: float

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL of llama.cpp's own HTTP server, e.g. http://127.0.0.1:PORT/v1."""
        return str(self.server.listening_address).rstrip("/") + "/v1"


_loaded: dict[str, LoadedModel] = {}
_load_lock = threading.Lock()


def load_local(name: str, settings: Settings | None = None) -> LoadedModel:
    """Verify and load a local model once per process; later calls return the same one."""
    with _load_lock:
        if name in _loaded:
            return _loaded[name]
        settings = settings or Settings.from_env()
        spec = get_spec(name)
        path = ensure_model(spec, settings)
        try:
            import xllamacpp
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ModelUnavailableError("the local backend needs xllamacpp: pip install xllamacpp") from exc
        start = time.perf_counter()
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.verbosity = 0
        params.n_ctx = spec.n_ctx
        params.cpuparams.n_threads = settings.llm_threads
        params.cpuparams_batch.n_threads = settings.llm_threads
        params.model_alias = {name}
        params.hostnames = ["127.0.0.1"]
        params.port = 0
        api_key = secrets.token_urlsafe(24)
        params.api_keys = [api_key]
        server = xllamacpp.Server(params)
        loaded = LoadedModel(
            name=name,
            server=server,
            path=path,
            api_key=api_key,
            threads=settings.llm_threads,
            n_ctx=spec.n_ctx,
            load_s=time.perf_counter() - start,
        )
        _loaded[name] = loaded
        return loaded


def loaded_models() -> list[str]:
    with _load_lock:
        return sorted(_loaded)


def _request_error(model: str, err: Any) -> ModelRequestError:
    """llama.cpp reports errors as `{"code": 400, "message": ..., "type": ...}`."""
    if isinstance(err, dict):
        code = err.get("code")
        return ModelRequestError(
            f"{model}: {err.get('type', 'error')}: {err.get('message', err)}",
            status=code if isinstance(code, int) else None,
        )
    return ModelRequestError(f"{model}: {err}")


class LocalChatModel(ChatModel):
    """A local GGUF model, e.g. `LocalChatModel("smollm2-135m")` (registry name `local:smollm2-135m`)."""

    def __init__(
        self, model: str, settings: Settings | None = None, *, default_max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> None:
        self.spec = get_spec(model)  # unknown names fail here, before any loading
        self.name = f"local:{model}"
        self.settings = settings
        self.default_max_tokens = default_max_tokens

    def load(self) -> LoadedModel:
        """Verify and load the model now (otherwise the first request does it)."""
        testing.ensure_real_calls_allowed(self.name)
        return load_local(self.spec.name, self.settings)

    def _payload(self, req: ChatRequest, *, stream: bool) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "messages": wire.messages_payload(req),
            **wire.sampling_payload(req, self.default_max_tokens),
        }
        schema = req.json_schema()
        if schema is not None:
            payload["response_format"] = {"type": "json_object", "schema": schema}
        if stream:
            payload["stream"] = True
        return payload

    def _call(self, loaded: LoadedModel, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            out = loaded.server.handle_chat_completions(payload)
        except ValueError as exc:
            raise ModelRequestError(f"{self.name}: {exc}") from exc
        if isinstance(out, dict) and "error" in out:
            raise _request_error(self.name, out["error"])
        return dict(out)

    async def _raw(self, req: ChatRequest) -> ChatResponse:
        loaded = await asyncio.to_thread(self.load)
        payload = self._payload(req, stream=False)
        start = time.perf_counter()
        try:
            out = await asyncio.wait_for(asyncio.to_thread(self._call, loaded, payload), req.timeout_s)
        except TimeoutError as exc:
            raise ModelTimeoutError(f"{self.name}: no reply within {req.timeout_s} s") from exc
        latency = (time.perf_counter() - start) * 1000
        return wire.response_from_dict(out, model=self.name, latency_ms=latency)

    async def request(self, req: ChatRequest) -> ChatResponse:
        return await structured.complete(self._raw, req, self.name)

    async def stream(self, req: ChatRequest) -> AsyncIterator[str]:
        loaded = await asyncio.to_thread(self.load)
        payload = self._payload(req, stream=True)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def on_chunk(chunk: dict[str, Any]) -> bool:
            if stop.is_set():
                return True  # True asks llama.cpp to stop generating
            loop.call_soon_threadsafe(queue.put_nowait, ("chunk", chunk))
            return False

        def work() -> None:
            try:
                loaded.server.handle_chat_completions(payload, on_chunk)
                loop.call_soon_threadsafe(queue.put_nowait, ("done", None))
            except Exception as exc:
                loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))

        worker = loop.run_in_executor(None, work)
        try:
            while True:
                kind, item = await queue.get()
                if kind == "done":
                    break
                if kind == "error":
                    raise ModelRequestError(f"{self.name}: {item}") from item
                if isinstance(item, dict) and "error" in item:
                    raise _request_error(self.name, item["error"])
                text = wire.delta_text(item)
                if text:
                    yield text
        finally:
            stop.set()
            await worker
