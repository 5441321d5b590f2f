"""Structured output: validate against the schema, repair once, then a typed, counted error.

Judges that emit invalid JSON are the commonest way other tools crash long runs. Here a reply
that does not validate gets exactly one repair turn (the bad reply and the validation errors
are shown to the model); if that fails too, `StructuredOutputError` is raised and counted per
model, so a grader can route on it and the run's report can show how often it happened.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from ragloop.models.chat.base import ChatRequest, ChatResponse, Message
from ragloop.models.errors import StructuredOutputError

RawCall = Callable[[ChatRequest], Awaitable[ChatResponse]]

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
_lock = threading.Lock()
_stats: dict[str, Counter[str]] = {}


def _count(model: str, event: str) -> None:
    with _lock:
        _stats.setdefault(model, Counter())[event] += 1


def structured_stats() -> dict[str, dict[str, int]]:
    """Per model: `requested`, `valid_first_try`, `repaired`, `failed` since the process started."""
    with _lock:
        return {m: dict(c) for m, c in _stats.items()}


def reset_structured_stats() -> None:
    with _lock:
        _stats.clear()


def extract_json(text: str) -> str:
    """The JSON part of a reply: the text itself, a fenced block, or the outermost `{...}`."""
    s = text.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1).strip()
    if s.startswith(("{", "[")):
        return s
    start, end = s.find("{"), s.rfind("}")
    return s[start : end + 1] if 0 <= start < end else s


def validate(output_type: type[BaseModel], text: str) -> tuple[BaseModel | None, str]:
    """(instance, "") when the reply validates, else (None, a short description of what is wrong)."""
    try:
        return output_type.model_validate_json(extract_json(text)), ""
    except ValidationError as exc:
        errors = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()[:10])
        return None, errors


def schema_instruction(schema: dict[str, Any]) -> str:
    """The instruction for endpoints that cannot be constrained by the schema itself."""
    return "Reply with only a JSON object (no prose, no code fence) that matches this JSON schema:\n" + json.dumps(
        schema, separators=(",", ":")
    )


def _repair_request(req: ChatRequest, bad: str, errors: str) -> ChatRequest:
    note = (
        "Your reply was not valid JSON for the required schema. Errors: "
        f"{errors[:1000]}\nReply again with only the corrected JSON object."
    )
    extra = (Message(role="assistant", content=bad[:4000]), Message(role="user", content=note))
    return req.model_copy(update={"messages": (*req.messages, *extra)})


async def complete(raw: RawCall, req: ChatRequest, model: str) -> ChatResponse:
    """Call `raw` and, when `req.output_type` is set, validate (repairing once) into `parsed`."""
    resp = await raw(req)
    if req.output_type is None:
        return resp
    _count(model, "requested")
    parsed, errors = validate(req.output_type, resp.text)
    if parsed is not None:
        _count(model, "valid_first_try")
        return resp.model_copy(update={"parsed": parsed})
    second = await raw(_repair_request(req, resp.text, errors))
    usage = resp.usage + second.usage
    latency = resp.latency_ms + second.latency_ms
    parsed, errors2 = validate(req.output_type, second.text)
    if parsed is not None:
        _count(model, "repaired")
        return second.model_copy(update={"parsed": parsed, "usage": usage, "latency_ms": latency, "repaired": True})
    _count(model, "failed")
    raise StructuredOutputError(
        f"{model}: reply does not match {req.output_type.__name__} after one repair attempt: {errors2}",
        model=model,
        raw_text=second.text,
        errors=errors2,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
    )
