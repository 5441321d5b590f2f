"""OpenTelemetry traces: one question through the real service and graph (the scripted test chat model)
is one trace, request span → graph span → one span per node → model-call spans, and every node span's
attributes are what the stored trace record of that step says; a worker job is a span with its kind and
status; nothing is recorded when the environment names no exporter; and the OTLP/HTTP exporter the
`OTEL_*` environment configures really ships the spans to a receiver on loopback."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry import trace as otel_trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from ragloop import tracing
from ragloop.agent.details import GradeDetail
from ragloop.agent.graph import NODES
from ragloop.agent.spans import node_attributes
from ragloop.improve.payload import StoredTrace
from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from tests.service.conftest import CFG, build_app, make_keys, running, worker_for

pytestmark = pytest.mark.anyio

CHAT = CFG.with_overrides(agent={"chat_model": "test:scripted"})
Q = "When was the Zorblat Bridge completed?"


def _plain(attrs: Any) -> dict[str, Any]:
    """Span attributes with sequences as lists (the SDK keeps them as tuples)."""
    return {k: list(v) if isinstance(v, tuple | list) else v for k, v in dict(attrs or {}).items()}


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider, exporter = _provider()
    with tracing.use_provider(provider):
        yield exporter
    provider.shutdown()


def _children(all_spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    found = [s for s in all_spans if s.parent is not None and s.parent.span_id == parent.context.span_id]
    return sorted(found, key=lambda s: s.start_time or 0)


def _values(all_spans: Sequence[ReadableSpan]) -> str:
    return repr([dict(s.attributes or {}) for s in all_spans] + [s.name for s in all_spans])


async def _ask(store: Store, keys_header: dict[str, str]) -> str:
    async with running(build_app(store, config=CHAT)) as c:
        r = await c.post("/v1/query", json={"question": Q, "session_id": "s1"}, headers=keys_header)
        assert r.status_code == 200, r.text
        return str(r.json()["answer_id"])


async def test_a_question_is_one_trace_whose_node_spans_carry_the_trace_records(
    collection: Collection, store: Store, spans: InMemorySpanExporter
) -> None:
    keys = make_keys(store)
    answer_id = await _ask(store, keys.u)
    finished = spans.get_finished_spans()

    requests = [s for s in finished if s.kind == SpanKind.SERVER and s.attributes.get("url.path") == "/v1/query"]
    assert len(requests) == 1, [s.name for s in finished]
    request = requests[0]
    assert request.name == "POST /v1/query"
    assert request.attributes["ragloop.answer_id"] == answer_id
    assert request.attributes["http.response.status_code"] == 200
    (graph,) = _children(finished, request)
    assert graph.name == "ragloop.graph"
    assert {s.context.trace_id for s in finished if s.context} >= {request.context.trace_id}

    nodes = _children(finished, graph)
    stored = store.queries.get_answer(answer_id)
    assert stored is not None
    records = StoredTrace.load(stored.trace).records
    # one span per step, in order, named by the node, with the attributes derived from the stored record
    assert [n.name for n in nodes] == [r.node for r in records]
    assert {n.name for n in nodes} <= set(NODES)
    for span_, rec in zip(nodes, records, strict=True):
        attrs = _plain(span_.attributes)
        assert attrs == _plain(node_attributes(rec)), rec.node
        assert (attrs["ragloop.node"], attrs["ragloop.decision"]) == (rec.node, rec.decision)
        assert span_.context.trace_id == request.context.trace_id
    grade = next(r for r in records if isinstance(r.detail, GradeDetail))
    grade_span = nodes[records.index(grade)]
    assert isinstance(grade.detail, GradeDetail) and grade.detail.scores
    assert list(grade_span.attributes["ragloop.grade.scores.values"]) == list(grade.detail.scores.values())
    assert list(grade_span.attributes["ragloop.grade.scores.keys"]) == list(grade.detail.scores)
    assert grade_span.attributes["ragloop.grade.reason.length"] == len(grade.detail.reason)
    assert graph.attributes["ragloop.trace.path"] == tuple(r.node for r in records)
    assert graph.attributes["ragloop.trace.steps"] == len(records)

    # the model calls are children of the node that made them, one span per logged call
    calls = [s for s in finished if s.name == "chat test:scripted"]
    logged = store.model_calls.for_answer(answer_id)
    assert calls and len(calls) == len(logged)
    by_id = {n.context.span_id: n for n in nodes}
    for call in calls:
        assert call.parent is not None and call.parent.span_id in by_id
        node = by_id[call.parent.span_id]
        assert call.attributes["ragloop.step"] == node.name
        assert call.attributes["gen_ai.usage.input_tokens"] > 0
        assert call.attributes["ragloop.run_id"] == answer_id
    # text stays out by default, and secrets always
    everything = _values(finished)
    assert Q not in everything and "Zorblat" not in everything
    assert keys.user not in everything and keys.admin not in everything
    assert graph.attributes["ragloop.question.length"] == len(Q)


async def test_a_streamed_answer_is_one_trace_too(
    collection: Collection, store: Store, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    keys = make_keys(store)
    async with running(build_app(store, config=CHAT)) as c:
        r = await c.post("/v1/query?stream=true", json={"question": Q, "session_id": "s2"}, headers=keys.u)
        assert r.status_code == 200, r.text
    finished = spans.get_finished_spans()
    (request,) = [s for s in finished if s.kind == SpanKind.SERVER and s.attributes.get("url.path") == "/v1/query"]
    (graph,) = _children(finished, request)
    assert graph.name == "ragloop.graph" and _children(finished, graph)
    assert request.attributes["ragloop.answer_id"] in r.text
    assert request.end_time is not None and graph.end_time is not None and request.end_time >= graph.end_time
    assert "Failed to detach context" not in caplog.text


async def test_content_capture_puts_the_question_and_answer_in_the_graph_span(
    collection: Collection, store: Store
) -> None:
    provider, exporter = _provider()
    keys = make_keys(store)
    with tracing.use_provider(provider, content=True):
        await _ask(store, keys.u)
    (graph,) = [s for s in exporter.get_finished_spans() if s.name == "ragloop.graph"]
    assert graph.attributes["input.value"] == Q and graph.attributes["ragloop.question"] == Q
    assert graph.attributes["output.value"]


async def test_a_worker_job_is_a_span_with_its_kind_and_status(
    collection: Collection, store: Store, spans: InMemorySpanExporter
) -> None:
    answer_id = await _ask(store, make_keys(store).u)
    (request,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    spans.clear()
    assert await worker_for(store).run(drain=True) >= 1
    jobs = [s for s in spans.get_finished_spans() if s.name.startswith("ragloop.job ")]
    assert jobs, [s.name for s in spans.get_finished_spans()]
    heuristic = next(s for s in jobs if s.attributes["ragloop.job.kind"] == "heuristic")
    assert heuristic.name == "ragloop.job heuristic" and heuristic.kind == SpanKind.CONSUMER
    assert heuristic.attributes["ragloop.answer_id"] == answer_id
    assert heuristic.attributes["ragloop.job.status"] == "completed"
    assert heuristic.parent is None  # a root: the request that queued it has ended, and is linked
    assert [(lk.context.trace_id, lk.context.span_id) for lk in heuristic.links] == [
        (request.context.trace_id, request.context.span_id)
    ]


def test_a_malformed_stored_trace_context_is_no_link(spans: InMemorySpanExporter) -> None:
    for bad in ("", "00-xyz", "00-" + "0" * 32 + "-" + "0" * 16 + "-01", "00-" + "g" * 32 + "-" + "1" * 16 + "-01"):
        with tracing.span("job", link=bad):
            pass
    assert all(not s.links for s in spans.get_finished_spans())
    with tracing.span("request"):
        parent = tracing.traceparent()
    with tracing.span("job", link=parent) as sp:
        assert sp.links and f"{sp.links[0].context.span_id:016x}" in parent


async def test_a_document_upload_job_is_a_span_with_its_kind_and_status(
    collection: Collection, store: Store, spans: InMemorySpanExporter
) -> None:
    import asyncio

    from tests.service.test_documents import NEW_DOC, wait_job

    keys = make_keys(store)
    async with running(build_app(store)) as c:
        r = await c.post(
            "/v1/collections/default/documents",
            files=[("files", ("lighthouse.md", NEW_DOC, "text/markdown"))],
            headers=keys.a,
        )
        assert r.status_code == 202, r.text
        job_id = r.json()["job_id"]
        assert (await wait_job(c, job_id, keys.a))["status"] == "succeeded"
        for _ in range(200):  # the span ends just after the job's row is finished
            done = [s for s in spans.get_finished_spans() if s.name == "ragloop.document_job ingest"]
            if done:
                break
            await asyncio.sleep(0.01)
    (job,) = done
    assert job.attributes["ragloop.job.id"] == job_id and job.attributes["ragloop.job.status"] == "succeeded"
    assert job.kind == SpanKind.CONSUMER


async def test_a_periodic_round_is_a_span_and_a_failed_round_an_error_span(spans: InMemorySpanExporter) -> None:
    import asyncio

    from ragloop.service.periodic import PeriodicTasks

    rounds: list[str] = []

    def ok() -> None:
        rounds.append("ok")

    def boom() -> None:
        rounds.append("boom")
        raise RuntimeError("secret-looking message sk-123")

    tasks = PeriodicTasks()
    tasks.add("tidy", 0.01, ok)
    tasks.add("broken", 0.01, boom)
    tasks.start()
    for _ in range(500):
        if {"ok", "boom"} <= set(rounds):
            break
        await asyncio.sleep(0.01)
    await tasks.stop()
    finished = spans.get_finished_spans()
    tidy = next(s for s in finished if s.name == "ragloop.periodic tidy")
    broken = next(s for s in finished if s.name == "ragloop.periodic broken")
    assert tidy.attributes["ragloop.job.kind"] == "tidy" and tidy.status.is_ok
    assert not broken.status.is_ok and broken.attributes["error.type"] == "RuntimeError"
    assert "sk-123" not in _values(finished) and not broken.events  # the type, never the message


async def test_off_by_default_records_nothing(
    collection: Collection, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    tracing.reset()
    try:
        assert tracing.configure() is False and not tracing.enabled() and tracing.tracer_provider() is None
        # a provider installed globally after start-up must not be picked up by ragloop or FastAPI either
        provider, exporter = _provider()
        monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", provider)
        await _ask(store, make_keys(store).u)
        await worker_for(store).run(drain=True)
        with tracing.span("ragloop.graph") as sp:
            assert sp is None
        assert exporter.get_finished_spans() == ()
    finally:
        tracing.reset()


async def test_a_provider_installed_globally_before_start_up_is_used_as_it_is(
    collection: Collection, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`opentelemetry-instrument ragloop serve`: the host's provider gets ragloop's spans, and ragloop
    builds no second exporter (which would ship every span twice)."""
    provider, exporter = _provider()
    monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", provider)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # would be used by an own exporter
    tracing.reset()
    try:
        assert tracing.configure() is True and tracing.tracer_provider() is provider
        await _ask(store, make_keys(store).u)
    finally:
        tracing.reset()  # not owned: left running for its owner
    names = {s.name for s in exporter.get_finished_spans()}
    assert {"POST /v1/query", "ragloop.graph", "retrieve"} <= names
    provider.shutdown()


@pytest.mark.parametrize(
    ("env", "exporters"),
    [
        ({}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, ()),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, ("console", "otlp")),
    ],
)
def test_the_environment_decides_the_exporters(env: dict[str, str], exporters: tuple[str, ...]) -> None:
    assert tracing.TracingConfig.from_env(env).exporters == exporters


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: POST /v1/traces with a protobuf ExportTraceServiceRequest."""

    received: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(404)
            self.end_headers()
            return
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        self.received.append(req)
        out = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    received: list[ExportTraceServiceRequest] = []
    handler = type("Handler", (_Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_the_otlp_exporter_configured_by_the_environment_ships_the_spans(
    collection: Collection,
    store: Store,
    receiver: tuple[str, list[ExportTraceServiceRequest]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, received = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "ragloop-under-test")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    tracing.reset()
    try:
        assert tracing.configure() is True
        answer_id = await _ask(store, make_keys(store).u)
    finally:
        tracing.reset()  # shuts the provider down: the batch is flushed to the receiver
    names: list[str] = []
    service_names: set[str] = set()
    answer_ids: set[str] = set()
    for req in received:
        for rs in req.resource_spans:
            service_names |= {a.value.string_value for a in rs.resource.attributes if a.key == "service.name"}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    names.append(s.name)
                    answer_ids |= {a.value.string_value for a in s.attributes if a.key == "ragloop.answer_id"}
    assert service_names == {"ragloop-under-test"}
    assert "POST /v1/query" in names and "ragloop.graph" in names
    assert {"condense", "retrieve", "grade"} <= set(names)
    assert answer_id in answer_ids


BLOCKED = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
from ragloop import tracing
import ragloop.agent.api, ragloop.models.chat
assert tracing.configure() is False and not tracing.enabled()
with tracing.span("x", {"a": 1}) as sp:
    assert sp is None
tracing.annotate_current({"a": 1})
print("ok")
"""


def test_without_opentelemetry_installed_everything_imports_and_tracing_stays_off() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-c", BLOCKED], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert "pip install 'ragloop[otel]'" in out.stderr
