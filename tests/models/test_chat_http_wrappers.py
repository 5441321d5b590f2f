"""The `openai:` backend and the retry / rate-limit wrappers against a real loopback HTTP server.

No client is patched: the official SDK talks HTTP to a server that answers 429 / 5xx / 400 /
200 from a script, and the server's own clock says when each request arrived.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from ragloop.models.chat import ChatModel, ChatRequest, ChatResponse, RateLimited, Retrying, run_sync
from ragloop.models.chat.openai_compat import OpenAIChatModel, parse_retry_after
from ragloop.models.errors import (
    ModelRequestError,
    ModelTimeoutError,
    QuotaExhaustedError,
    RateLimitedError,
    TransientModelError,
)

from .scripted_server import Reply, ScriptedServer, completion, error


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer().start()
    try:
        yield s
    finally:
        s.stop()


def _model(server: ScriptedServer) -> OpenAIChatModel:
    return OpenAIChatModel("scripted-model", base_url=server.base_url, api_key="sk-test")


async def _ask(model: ChatModel, req: ChatRequest) -> ChatResponse:
    async with model:
        return await model.request(req)


def test_plain_request_maps_the_reply_and_sends_our_knobs(server: ScriptedServer, real: None) -> None:
    server.script = [Reply(body=completion("hi there", prompt_tokens=11, completion_tokens=2))]
    req = ChatRequest.user("hello", system="be brief", max_tokens=9, seed=3, stop=("\n",))
    resp = run_sync(_ask(_model(server), req))
    assert resp.text == "hi there"
    assert resp.usage.prompt_tokens == 11 and resp.usage.completion_tokens == 2
    assert resp.model == "openai:scripted-model" and resp.latency_ms > 0
    (seen,) = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.body["model"] == "scripted-model" and seen.body["max_tokens"] == 9
    assert seen.body["seed"] == 3 and seen.body["stop"] == ["\n"] and seen.body["temperature"] == 0.0
    assert seen.body["messages"][0] == {"role": "system", "content": "be brief"}


def test_retry_after_is_honoured_then_5xx_backs_off(server: ScriptedServer, real: None) -> None:
    server.script = [
        Reply(429, error("Rate limit reached for requests", "rate_limit_exceeded"), {"Retry-After": "0.4"}),
        Reply(503, error("overloaded")),
        Reply(200, completion("finally")),
    ]
    model = Retrying(_model(server), base_delay_s=0.1, max_attempts=4, rng=random.Random(0))
    resp = run_sync(_ask(model, ChatRequest.user("q")))
    assert resp.text == "finally"
    assert len(server.seen) == 3
    gap_after_429, gap_after_503 = server.gaps()
    assert model.delays[0] == pytest.approx(0.4)
    assert gap_after_429 >= 0.4
    assert 0.05 <= model.delays[1] <= 0.2  # attempt 2: base * 2, jittered to 50-100%
    assert gap_after_503 >= model.delays[1]
    assert model.retries == 2


def test_backoff_grows_exponentially_and_gives_up_after_max_attempts(server: ScriptedServer, real: None) -> None:
    server.default = Reply(500, error("boom"))
    model = Retrying(_model(server), base_delay_s=0.02, max_attempts=4, jitter=False)
    with pytest.raises(TransientModelError) as info:
        run_sync(_ask(model, ChatRequest.user("q")))
    assert info.value.status == 500
    assert len(server.seen) == 4
    assert model.delays == [0.02, 0.04, 0.08]
    assert all(g >= d for g, d in zip(server.gaps(), model.delays, strict=True))


def test_quota_exhaustion_is_its_own_error_and_never_retried(server: ScriptedServer, real: None) -> None:
    server.script = [
        Reply(
            429,
            error(
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
            ),
        )
    ]
    model = Retrying(_model(server), base_delay_s=0.01)
    with pytest.raises(QuotaExhaustedError):
        run_sync(_ask(model, ChatRequest.user("q")))
    assert len(server.seen) == 1 and model.retries == 0


def test_a_retry_after_longer_than_the_cap_goes_to_the_caller(server: ScriptedServer, real: None) -> None:
    server.script = [Reply(429, error("slow down"), {"Retry-After": "3600"})]
    model = Retrying(_model(server), max_retry_after_s=5)
    with pytest.raises(RateLimitedError) as info:
        run_sync(_ask(model, ChatRequest.user("q")))
    assert info.value.retry_after == 3600
    assert len(server.seen) == 1


def test_client_errors_are_not_retried(server: ScriptedServer, real: None) -> None:
    server.script = [Reply(401, error("bad key", "invalid_api_key"))]
    model = Retrying(_model(server), base_delay_s=0.01)
    with pytest.raises(ModelRequestError) as info:
        run_sync(_ask(model, ChatRequest.user("q")))
    assert info.value.status == 401 and len(server.seen) == 1


def test_timeouts_are_typed_and_retried(server: ScriptedServer, real: None) -> None:
    server.script = [Reply(200, completion("late"), delay_s=1.0), Reply(200, completion("on time"))]
    model = Retrying(_model(server), base_delay_s=0.01)
    resp = run_sync(_ask(model, ChatRequest.user("q", timeout_s=0.3)))
    assert resp.text == "on time"
    assert model.retries == 1
    with pytest.raises(ModelTimeoutError):
        server.script = [Reply(200, completion("late"), delay_s=1.0)]
        run_sync(_ask(_model(server), ChatRequest.user("q", timeout_s=0.3)))


def test_requests_per_minute_spaces_requests_at_the_server(server: ScriptedServer, real: None) -> None:
    inner = _model(server)
    # one request every 0.5 s: wide enough that a loopback request, even on a loaded machine,
    # finishes well inside an interval, so the limiter (not the request time) sets the spacing
    model = RateLimited(inner, rpm=120, burst_requests=1)

    async def burst() -> None:
        async with model:
            for _ in range(4):
                await model.request(ChatRequest.user("q"))

    run_sync(burst())
    assert len(server.seen) == 4
    # The first request's arrival also carries connection set-up (up to ~0.2 s on a loaded
    # machine), so the spacing is read from the second arrival on: two full intervals.
    assert all(g >= 0.4 for g in server.gaps()[1:]), server.gaps()  # spaced, with slack for a loaded machine
    assert server.seen[-1].t - server.seen[1].t >= 0.9
    assert model.waited_s > 0.2  # the callers really waited


def test_tokens_per_minute_waits_for_the_token_budget(server: ScriptedServer, real: None) -> None:
    server.default = Reply(200, completion("ok", prompt_tokens=3, completion_tokens=47))
    # 100 tokens a second, a bucket of 60; each request reserves ~53 (prompt estimate + max_tokens)
    model = RateLimited(_model(server), tpm=6000, burst_tokens=60)

    async def two() -> float:
        async with model:
            t0 = time.monotonic()
            await model.request(ChatRequest.user("q", max_tokens=50))
            await model.request(ChatRequest.user("q", max_tokens=50))
            return t0

    # the second reservation needs ~46 more tokens at 100/s: it cannot reach the server before
    # ~0.46 s after the bucket was first drawn on, however long the first request itself took
    # (one clock for both sides: the scripted server runs in this process)
    t0 = run_sync(two())
    assert len(server.seen) == 2
    assert server.seen[1].t - t0 >= 0.4


class Verdict(BaseModel):
    supported: bool


def test_structured_output_falls_back_from_json_schema_to_json_mode_to_text(server: ScriptedServer, real: None) -> None:
    server.script = [
        Reply(400, error("response_format json_schema is not supported by this model")),
        Reply(400, error("'response_format' of type 'json_object' is not supported")),
        Reply(200, completion('Here you go: {"supported": true}')),
        Reply(200, completion('{"supported": false}')),
    ]
    model = _model(server)

    async def go() -> tuple[ChatResponse, ChatResponse]:
        async with model:
            first = await model.request(ChatRequest.user("claim?", output_type=Verdict))
            second = await model.request(ChatRequest.user("claim 2?", output_type=Verdict))
            return first, second

    first, second = run_sync(go())
    assert first.parsed == Verdict(supported=True)
    assert second.parsed == Verdict(supported=False)
    formats = [s.body.get("response_format", {}).get("type") for s in server.seen]
    assert formats == ["json_schema", "json_object", None, None]  # the working mode is remembered
    assert model.structured_mode == "text"
    assert server.seen[0].body["response_format"]["json_schema"]["schema"]["required"] == ["supported"]
    assert "JSON schema" in server.seen[2].body["messages"][0]["content"]


def test_other_400s_are_not_mistaken_for_unsupported_formats(server: ScriptedServer, real: None) -> None:
    server.script = [Reply(400, error("maximum context length exceeded"))]
    with pytest.raises(ModelRequestError):
        run_sync(_ask(_model(server), ChatRequest.user("q", output_type=Verdict)))
    assert len(server.seen) == 1


def test_missing_key_without_base_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, real: None) -> None:
    for var in ("RAGLOOP_OPENAI_API_KEY", "OPENAI_API_KEY", "RAGLOOP_OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    from ragloop.models.errors import ModelUnavailableError

    with pytest.raises(ModelUnavailableError, match="RAGLOOP_OPENAI_API_KEY"):
        run_sync(_ask(OpenAIChatModel("gpt-4o-mini"), ChatRequest.user("q")))


def test_base_url_and_key_come_from_the_environment(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch, real: None
) -> None:
    monkeypatch.setenv("RAGLOOP_OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("RAGLOOP_OPENAI_API_KEY", "sk-env")
    from ragloop.models.chat import make_chat_model

    resp = run_sync(_ask(make_chat_model("openai:env-model"), ChatRequest.user("q")))
    assert resp.text == "hello"
    assert server.seen[0].headers["authorization"] == "Bearer sk-env"
    assert server.seen[0].body["model"] == "env-model"


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    got = parse_retry_after({"Retry-After": future})
    assert got is not None and 25 <= got <= 31
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None
