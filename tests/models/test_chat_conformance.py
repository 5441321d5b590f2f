"""One conformance suite that every chat backend must pass: the test double, the in-process
local model, and the `openai:` client against llama.cpp's server on loopback."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import BaseModel

from ragloop.models.chat import ChatModel, ChatRequest, ChatResponse, TestModel, run_sync
from ragloop.models.chat.local import LoadedModel, LocalChatModel
from ragloop.models.chat.openai_compat import OpenAIChatModel


class City(BaseModel):
    name: str
    country: str


def _test_model(smol: LoadedModel) -> ChatModel:
    return TestModel(default_text="Paris is the capital.", first_token_logprobs={"Yes": -0.2, "No": -1.8})


def _local(smol: LoadedModel) -> ChatModel:
    return LocalChatModel("smollm2-135m")


def _openai(smol: LoadedModel) -> ChatModel:
    return OpenAIChatModel("smollm2-135m", base_url=smol.base_url, api_key=smol.api_key)


BACKENDS: dict[str, Callable[[LoadedModel], ChatModel]] = {
    "test": _test_model,
    "local": _local,
    "openai": _openai,
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, smol: LoadedModel, real: None) -> ChatModel:
    return BACKENDS[request.param](smol)


def test_conformance(backend: ChatModel) -> None:
    plain_req = ChatRequest.user("What is the capital of France?", max_tokens=12)

    async def exercise() -> tuple[ChatResponse, str, ChatResponse, ChatResponse]:
        async with backend:
            plain = await backend.request(plain_req)
            streamed = "".join([p async for p in backend.stream(plain_req)])
            city = await backend.request(
                ChatRequest.user("Give the city Paris and its country as JSON.", output_type=City, max_tokens=40)
            )
            yes_no = await backend.request(
                ChatRequest.user("Is Paris in France? yes or no", max_tokens=1, top_logprobs=2)
            )
        await backend.aclose()  # closing twice is safe
        return plain, streamed, city, yes_no

    plain, streamed, city, yes_no = run_sync(exercise())
    assert plain.text.strip() and plain.model == backend.name and not plain.cached
    assert plain.usage.prompt_tokens > 0 and plain.usage.completion_tokens > 0
    assert plain.latency_ms >= 0
    assert streamed == plain.text
    assert isinstance(city.parsed, City)
    assert yes_no.logprobs and len(yes_no.logprobs[0].top_logprobs) == 2
