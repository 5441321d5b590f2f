"""Structured output: validate, one repair turn, then a typed error that is counted."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from ragloop.models.chat import ChatRequest, TestModel, reset_structured_stats, run_sync, structured_stats
from ragloop.models.chat.structured import extract_json
from ragloop.models.errors import StructuredOutputError


class Grade(BaseModel):
    relevant: bool
    score: float


@pytest.fixture(autouse=True)
def _fresh_stats() -> None:
    reset_structured_stats()


def test_valid_json_is_parsed_first_time() -> None:
    model = TestModel(['{"relevant": true, "score": 0.9}'], name="test:grader")
    resp = run_sync(model.request(ChatRequest.user("grade", output_type=Grade)))
    assert resp.parsed == Grade(relevant=True, score=0.9)
    assert not resp.repaired and len(model.requests) == 1
    assert structured_stats()["test:grader"] == {"requested": 1, "valid_first_try": 1}


def test_invalid_then_valid_is_repaired_once_with_the_errors_shown() -> None:
    model = TestModel(["I think it is relevant.", '```json\n{"relevant": false, "score": 0.1}\n```'], name="test:g")
    resp = run_sync(model.request(ChatRequest.user("grade", output_type=Grade)))
    assert resp.parsed == Grade(relevant=False, score=0.1)
    assert resp.repaired
    assert len(model.requests) == 2
    repair = model.requests[1]
    assert repair.messages[-2].role == "assistant" and repair.messages[-2].content == "I think it is relevant."
    assert "not valid JSON" in repair.messages[-1].content
    assert repair.output_type is Grade
    # usage covers both turns
    first_only = TestModel(['{"relevant": true, "score": 1}'])
    single = run_sync(first_only.request(ChatRequest.user("grade", output_type=Grade)))
    assert resp.usage.prompt_tokens > single.usage.prompt_tokens
    assert structured_stats()["test:g"] == {"requested": 1, "repaired": 1}


def test_invalid_twice_raises_a_typed_error_that_is_counted() -> None:
    model = TestModel(['{"relevant": "maybe"}', "still not json"], name="test:bad")
    with pytest.raises(StructuredOutputError) as info:
        run_sync(model.request(ChatRequest.user("grade", output_type=Grade)))
    err = info.value
    assert err.model == "test:bad" and err.raw_text == "still not json"
    assert err.prompt_tokens > 0 and err.completion_tokens > 0
    assert len(model.requests) == 2  # exactly one repair attempt
    assert structured_stats()["test:bad"] == {"requested": 1, "failed": 1}
    # a second failure is counted too
    with pytest.raises(StructuredOutputError):
        run_sync(TestModel(["x", "y"], name="test:bad").request(ChatRequest.user("g", output_type=Grade)))
    assert structured_stats()["test:bad"]["failed"] == 2


def test_schema_violations_are_described_by_field() -> None:
    model = TestModel(['{"relevant": true, "score": "high"}', '{"relevant": true, "score": 0.5}'])
    run_sync(model.request(ChatRequest.user("g", output_type=Grade)))
    assert "score" in model.requests[1].messages[-1].content


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', '{"a": 1}'),
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ('Sure! Here it is: {"a": {"b": 2}} Hope it helps.', '{"a": {"b": 2}}'),
        ("no json here", "no json here"),
    ],
)
def test_extract_json(text: str, expected: str) -> None:
    assert extract_json(text) == expected
