"""OpenTelemetry traces, off by default: spans for the answer graph's nodes, model calls, the service's
requests and the background jobs, exported by OTLP as the standard `OTEL_*` environment says.

Why a module at the bottom of the layers: the graph (`ragloop.agent`), the call log
(`ragloop.models.chat`), the service and the workers all open spans, and none of them may import
another; they all import this. It imports only `ragloop.text.pii` (lazily, to redact captured text),
and nothing of OpenTelemetry that is
not installed: the `otel` extra brings the SDK and the OTLP/HTTP exporter; without it (the API
package alone, or nothing) every call here is a no-op.

Off unless the environment names an exporter: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) turns OTLP on, `OTEL_TRACES_EXPORTER` picks exporters
explicitly (`otlp`, `console`, `none`), `OTEL_SDK_DISABLED=true` wins over both. The OpenTelemetry
spec defaults the exporter to `otlp`; ragloop does not, because a laptop install must not try to
reach localhost:4318 on every answer. Everything else (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`, ...) is read by the SDK itself.

Off costs one attribute read per would-be span: `span()` yields None without touching OpenTelemetry,
and callers compute attributes only when `enabled()` (benchmarks/otel_overhead.py measures it).

Text: spans carry lengths and ids, never questions, answers or prompts, unless
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` (the GenAI semantic conventions' switch) allows
it; even then the text is redacted of personal data (`ragloop.text.pii`, `[EMAIL]`, `[CARD]`, ...).
API keys and other secrets are never attributes.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger("ragloop.tracing")

CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
TRUE = ("1", "true", "yes", "on")
EXPORTERS = ("otlp", "console")
INSTRUMENTATION = "ragloop"

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[bool] | Sequence[int] | Sequence[float]
Attributes = dict[str, AttributeValue]
SpanKind = Literal["internal", "server", "client", "consumer", "producer"]


@dataclass(frozen=True)
class TracingConfig:
    """What the environment asks for."""

    exporters: tuple[str, ...] = ()
    capture_content: bool = False
    protocol: str = "http/protobuf"

    @property
    def on(self) -> bool:
        return bool(self.exporters)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TracingConfig:
        env = os.environ if environ is None else environ
        content = env.get(CONTENT_ENV, "").strip().lower() in TRUE
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() in TRUE:
            return cls(capture_content=content)
        named = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
        if not named:  # unlike the spec's default (otlp), only an endpoint turns OTLP on
            endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            named = ["otlp"] if endpoint else []
        unknown = [e for e in named if e not in (*EXPORTERS, "none")]
        if unknown:
            log.warning("OTEL_TRACES_EXPORTER names %s; ragloop exports to %s only", unknown, ", ".join(EXPORTERS))
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
        return cls(
            exporters=tuple(dict.fromkeys(e for e in named if e in EXPORTERS)),
            capture_content=content,
            protocol=protocol.strip().lower() or "http/protobuf",
        )


class _State:
    """The process's tracer (None: off). `owned`: a provider this module built and must flush."""

    def __init__(self) -> None:
        self.tracer: Any = None
        self.provider: Any = None
        self.owned = False
        self.content = False
        self.configured = False


_state = _State()
_lock = threading.Lock()


def enabled() -> bool:
    """Whether spans are recorded (callers skip computing attributes when not)."""
    return _state.tracer is not None


def capture_content() -> bool:
    """Whether question, answer and prompt text may go into spans (default: lengths only)."""
    return _state.content


def tracer_provider() -> Any:
    """The provider in use (None when off): for FastAPI's request spans."""
    return _state.provider if _state.tracer is not None else None


def _sdk_provider(cfg: TracingConfig) -> Any:
    """A TracerProvider with one batch processor per exporter; None when the SDK is not installed."""
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.warning("OpenTelemetry export is configured but the SDK is missing: pip install 'ragloop[otel]'")
        return None
    attrs = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "ragloop"}
    provider = TracerProvider(resource=Resource.create(attrs))
    for name in cfg.exporters:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
            continue
        transport = "grpc" if cfg.protocol.startswith("grpc") else "http"
        try:
            exporter = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{transport}.trace_exporter")
        except ImportError:
            log.warning("no OTLP exporter for protocol %s: pip install 'ragloop[otel]' (http/protobuf)", cfg.protocol)
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter.OTLPSpanExporter()))  # reads OTEL_EXPORTER_OTLP_*
    return provider


def _global_sdk_provider() -> Any:
    """A provider someone else installed globally (`opentelemetry-instrument`, the host application)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return None
    return provider


def configure(environ: Mapping[str, str] | None = None) -> bool:
    """Set tracing up once per process from the environment (`ragloop serve`, `ragloop worker` and
    `create_app` call it); later calls return what the first decided. A provider already installed
    globally is used as it is, so an instrumented host does not export twice. Returns `enabled()`."""
    with _lock:
        if _state.configured:
            return enabled()
        _state.configured = True
        cfg = TracingConfig.from_env(environ)
        _state.content = cfg.capture_content
        provider, owned = _global_sdk_provider(), False
        if provider is None and cfg.on:
            provider, owned = _sdk_provider(cfg), True
        if provider is None:
            return False
        _install(provider, owned=owned)
        if owned:
            atexit.register(shutdown)
        log.info("OpenTelemetry traces on (%s)", ", ".join(cfg.exporters) or "the global provider")
        return True


def _install(provider: Any, *, owned: bool) -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("ragloop")
    except PackageNotFoundError:
        ours = "0"
    _state.provider, _state.owned = provider, owned
    _state.tracer = provider.get_tracer(INSTRUMENTATION, ours)


def shutdown() -> None:
    """Flush and close a provider this module built (service shutdown, worker exit); tracing is off after."""
    with _lock:
        provider, owned = _state.provider, _state.owned
        _state.tracer = _state.provider = None
        _state.owned = False
    if owned and provider is not None:
        provider.shutdown()


def reset() -> None:
    """Back to the unconfigured state (tests): the next `configure()` reads the environment again."""
    shutdown()
    with _lock:
        _state.configured = False
        _state.content = False


@contextmanager
def use_provider(provider: Any, *, content: bool = False) -> Iterator[None]:
    """Record into `provider` inside the block (tests with an in-memory exporter, an embedding
    application that owns its provider); what was configured before is restored after."""
    with _lock:
        saved = (_state.tracer, _state.provider, _state.owned, _state.content, _state.configured)
        _install(provider, owned=False)
        _state.content, _state.configured = content, True
    try:
        yield
    finally:
        with _lock:
            _state.tracer, _state.provider, _state.owned, _state.content, _state.configured = saved


_KINDS: dict[str, Any] = {}


def _kind(kind: SpanKind) -> Any:
    if not _KINDS:
        from opentelemetry.trace import SpanKind as K

        _KINDS.update(internal=K.INTERNAL, server=K.SERVER, client=K.CLIENT, consumer=K.CONSUMER, producer=K.PRODUCER)
    return _KINDS[kind]


_OFF: AbstractContextManager[None] = nullcontext(None)


def span(
    name: str, attributes: Attributes | None = None, *, kind: SpanKind = "internal", link: str = ""
) -> AbstractContextManager[Any]:
    """A span around the block, current inside it (children join it, across `asyncio.to_thread` too);
    yields None when tracing is off (one shared null context: nothing is allocated). An exception
    leaving the block marks the span as an error with its type (`error.type`), not its message: a
    message may quote a URL with a key in it. `link`: a W3C `traceparent` (`traceparent()`) of
    another trace this span follows from (a job's span links to the request that queued it).

    Safe inside async generators (the graph's turn, a streamed model call) that a consumer resumes in
    another context: the span is still ended, and the context it leaves behind is the one before it."""
    tracer = _state.tracer
    if tracer is None:
        return _OFF
    return _span(tracer, name, attributes, kind, link)


def traceparent() -> str:
    """The current span as a W3C `traceparent` header value ("" when off or outside any span)."""
    if _state.tracer is None:
        return ""
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _link(value: str) -> Any:
    """A link to the span a `traceparent` names; None when it is malformed (a stored row is not trusted)."""
    from opentelemetry.trace import Link, SpanContext, TraceFlags

    parts = value.split("-") if isinstance(value, str) else []
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        ctx = SpanContext(
            int(parts[1], 16), int(parts[2], 16), is_remote=True, trace_flags=TraceFlags(int(parts[3], 16))
        )
    except ValueError:
        return None
    return Link(ctx) if ctx.is_valid else None


@contextmanager
def _span(tracer: Any, name: str, attributes: Attributes | None, kind: SpanKind, link: str) -> Iterator[Any]:
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    linked = _link(link) if link else None
    sp = tracer.start_span(name, kind=_kind(kind), attributes=attributes, links=[linked] if linked else None)
    before = otel_context.get_current()
    token = otel_context.attach(trace.set_span_in_context(sp, before))
    try:
        yield sp
    except Exception as exc:
        sp.set_attribute("error.type", type(exc).__qualname__)
        sp.set_status(trace.StatusCode.ERROR, type(exc).__qualname__)
        raise
    finally:
        sp.end()
        try:
            token.var.reset(token)  # what `context.detach` does, without its error log when it cannot
        except ValueError:  # left in another context than the one it was entered in
            if trace.get_current_span() is sp:
                otel_context.attach(before)


def set_attributes(sp: Any, attributes: Attributes) -> None:
    """Set attributes on a span `span()` yielded (None: off, nothing to do)."""
    if sp is not None:
        sp.set_attributes(attributes)


def annotate_current(attributes: Attributes) -> None:
    """Add attributes to the span current now (the request span gets its answer id this way)."""
    if _state.tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(attributes)


def text(prefix: str, value: str | None) -> Attributes:
    """A text as `<prefix>.length`, plus the text itself only when content capture is allowed."""
    if value is None:
        return {}
    out: Attributes = {f"{prefix}.length": len(value)}
    if _state.content:
        out[prefix] = redacted(value)
    return out


def redacted(value: str) -> str:
    """A text as a span may carry it (with content capture on): without personal data."""
    from ragloop.text.pii import default_redactor

    return default_redactor().redact(value)
