"""The `local:` backend for real: SmolLM2-135M in-process through xllamacpp.

SmolLM2 hallucinates, so these tests check the code path (text, usage, streaming, schema-
constrained JSON, log-probabilities), not the quality of the answers.
"""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel

from ragloop.config.settings import Settings
from ragloop.models.chat import ChatRequest, ChatResponse, run_sync
from ragloop.models.chat.local import LoadedModel, LocalChatModel, load_local, loaded_models
from ragloop.models.errors import ModelRequestError


class Person(BaseModel):
    name: str
    age: int


@pytest.fixture
def model(smol: LoadedModel, smol_settings: Settings, real: None) -> LocalChatModel:
    return LocalChatModel("smollm2-135m", smol_settings)


def test_loaded_once_per_process(smol: LoadedModel, smol_settings: Settings) -> None:
    assert load_local("smollm2-135m", smol_settings) is smol
    assert "smollm2-135m" in loaded_models()
    assert smol.threads == 1 and smol.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_plain_answer_with_usage_and_latency(model: LocalChatModel) -> None:
    resp = run_sync(model.request(ChatRequest.user("What is the capital of France?", max_tokens=16)))
    assert resp.text.strip()
    assert resp.model == "local:smollm2-135m"
    assert 0 < resp.usage.completion_tokens <= 16 and resp.usage.prompt_tokens > 5
    assert resp.latency_ms > 0 and resp.finish_reason in ("stop", "length")
    assert resp.timings is not None and resp.timings["predicted_per_second"] > 0
    again = run_sync(model.request(ChatRequest.user("What is the capital of France?", max_tokens=16)))
    assert again.text == resp.text  # temperature 0 is deterministic


def test_stop_sequences_and_max_tokens_are_applied(model: LocalChatModel) -> None:
    resp = run_sync(model.request(ChatRequest.user("Count from 1 to 20, separated by commas.", max_tokens=5)))
    assert resp.usage.completion_tokens == 5 and resp.finish_reason == "length"


def test_streaming_yields_pieces_that_make_the_answer(model: LocalChatModel) -> None:
    req = ChatRequest.user("Write one sentence about the sea.", max_tokens=20)

    async def collect() -> list[str]:
        return [p async for p in model.stream(req)]

    pieces = run_sync(collect())
    assert len(pieces) > 3
    assert "".join(pieces) == run_sync(model.request(req)).text


def test_stopping_a_stream_early_stops_generation(model: LocalChatModel) -> None:
    async def first_two() -> list[str]:
        out = []
        stream = model.stream(ChatRequest.user("Tell me a long story about a dragon.", max_tokens=400))
        async for piece in stream:
            out.append(piece)
            if len(out) == 2:
                break
        await stream.aclose()
        return out

    assert len(run_sync(first_two())) == 2
    # the model is free again right away
    assert run_sync(model.request(ChatRequest.user("Hi", max_tokens=3))).text


def test_schema_constrained_json_is_parsed_into_the_model(model: LocalChatModel) -> None:
    req = ChatRequest.user(
        "Describe a person called Bob who is 30 years old as JSON.", output_type=Person, max_tokens=60
    )
    resp = run_sync(model.request(req))
    assert isinstance(resp.parsed, Person)
    assert Person.model_validate_json(resp.text) == resp.parsed


def test_logprobs_of_the_first_token(model: LocalChatModel) -> None:
    resp: ChatResponse = run_sync(
        model.request(ChatRequest.user("Is Paris in France? Answer yes or no.", max_tokens=1, top_logprobs=5))
    )
    assert resp.logprobs is not None and len(resp.logprobs) == 1
    first = resp.logprobs[0]
    assert len(first.top_logprobs) == 5
    assert first.top_logprobs[0].logprob >= first.top_logprobs[-1].logprob
    probs = resp.first_token_probs()
    assert 0 < sum(probs.values()) <= 1.0 + 1e-6
    assert math.isclose(first.logprob, max(t.logprob for t in first.top_logprobs), rel_tol=1e-4)


def test_a_prompt_over_the_context_size_is_a_typed_error(model: LocalChatModel) -> None:
    too_long = ChatRequest.user("word " * 5000, max_tokens=2)  # n_ctx is 4096
    with pytest.raises(ModelRequestError, match="exceed") as info:
        run_sync(model.request(too_long))
    assert info.value.status == 400

    async def consume() -> str:
        return "".join([p async for p in model.stream(too_long)])

    with pytest.raises(ModelRequestError, match="exceed"):
        run_sync(consume())
