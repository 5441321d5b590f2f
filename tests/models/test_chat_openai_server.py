"""Integration: a real OpenAI-compatible HTTP server on 127.0.0.1 serving a real model.

xllamacpp starts llama.cpp's own server when it loads SmolLM2 (once per test session, behind
a random API key); our `openai:` backend and the official `openai` SDK both talk to it.
"""

from __future__ import annotations

import openai
import pytest
from pydantic import BaseModel

from ragloop.models.chat import ChatRequest, ChatResponse, Retrying, run_sync
from ragloop.models.chat.local import LoadedModel
from ragloop.models.chat.openai_compat import OpenAIChatModel
from ragloop.models.errors import ModelRequestError


class Person(BaseModel):
    name: str
    age: int


def _backend(smol: LoadedModel) -> OpenAIChatModel:
    return OpenAIChatModel("smollm2-135m", base_url=smol.base_url, api_key=smol.api_key)


def test_official_sdk_against_the_llama_cpp_server(smol: LoadedModel) -> None:
    assert smol.base_url.startswith("http://127.0.0.1:")
    with openai.OpenAI(base_url=smol.base_url, api_key=smol.api_key, max_retries=0) as client:
        assert [m.id for m in client.models.list().data] == ["smollm2-135m"]
        done = client.chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=8,
            temperature=0,
        )
        assert done.choices[0].message.content
        assert done.usage is not None and 0 < done.usage.completion_tokens <= 8
        with client.chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=8,
            temperature=0,
            stream=True,
        ) as stream:
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == done.choices[0].message.content


def test_the_server_refuses_a_wrong_key(smol: LoadedModel, real: None) -> None:
    with (
        openai.OpenAI(base_url=smol.base_url, api_key="wrong", max_retries=0) as client,
        pytest.raises(openai.AuthenticationError),
    ):
        client.models.list()
    wrong = OpenAIChatModel("smollm2-135m", base_url=smol.base_url, api_key="wrong")
    retrying = Retrying(wrong, base_delay_s=0.01)

    async def ask() -> ChatResponse:
        async with retrying:
            return await retrying.request(ChatRequest.user("hi", max_tokens=2))

    with pytest.raises(ModelRequestError) as info:
        run_sync(ask())
    assert info.value.status == 401 and retrying.retries == 0


def test_our_backend_plain_structured_logprobs_and_stream(smol: LoadedModel, real: None) -> None:
    model = _backend(smol)

    async def session() -> tuple[ChatResponse, ChatResponse, ChatResponse, str]:
        async with model:
            plain = await model.request(ChatRequest.user("What is the capital of France?", max_tokens=12))
            person = await model.request(
                ChatRequest.user("A person called Ann aged 41, as JSON.", output_type=Person, max_tokens=60)
            )
            yes_no = await model.request(
                ChatRequest.user("Is the sky blue? Answer yes or no.", max_tokens=1, top_logprobs=4)
            )
            streamed = "".join(
                [p async for p in model.stream(ChatRequest.user("What is the capital of France?", max_tokens=12))]
            )
            return plain, person, yes_no, streamed

    plain, person, yes_no, streamed = run_sync(session())
    assert plain.text and plain.model == "openai:smollm2-135m"
    assert 0 < plain.usage.completion_tokens <= 12 and plain.usage.prompt_tokens > 0
    assert streamed == plain.text
    assert isinstance(person.parsed, Person)
    assert model.structured_mode == "json_schema"  # llama.cpp's server accepts JSON-schema output
    assert yes_no.logprobs is not None and len(yes_no.logprobs[0].top_logprobs) == 4
    assert sum(yes_no.first_token_probs().values()) <= 1.0 + 1e-6


def test_local_and_remote_paths_agree_at_temperature_zero(smol: LoadedModel, smol_settings: object, real: None) -> None:
    from ragloop.models.chat.local import LocalChatModel

    req = ChatRequest.user("Name a colour.", max_tokens=6)
    local = run_sync(LocalChatModel("smollm2-135m").request(req))
    model = _backend(smol)

    async def remote() -> ChatResponse:
        async with model:
            return await model.request(req)

    assert run_sync(remote()).text == local.text
