"""The OpenAI chat-completions wire format, shared by the `openai:` and `local:` backends.

llama.cpp's server answers in the same dialect as OpenAI, so both backends build their request
payloads and read their replies here; the SDK's pydantic objects are read via `model_dump()`.
"""

from __future__ import annotations

from typing import Any

from ragloop.models.chat.base import ChatRequest, ChatResponse, TokenLogprob, TopLogprob, Usage


def messages_payload(req: ChatRequest, extra_system: str | None = None) -> list[dict[str, str]]:
    """The messages as dicts; `extra_system` (a schema instruction) joins the system message."""
    msgs = [{"role": m.role, "content": m.content} for m in req.messages]
    if extra_system:
        if msgs and msgs[0]["role"] == "system":
            msgs[0] = {"role": "system", "content": msgs[0]["content"] + "\n\n" + extra_system}
        else:
            msgs.insert(0, {"role": "system", "content": extra_system})
    return msgs


def sampling_payload(req: ChatRequest, default_max_tokens: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"temperature": req.temperature}
    max_tokens = req.max_tokens if req.max_tokens is not None else default_max_tokens
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
    if req.seed is not None:
        out["seed"] = req.seed
    if req.stop:
        out["stop"] = list(req.stop)
    if req.top_logprobs:
        out["logprobs"] = True
        out["top_logprobs"] = req.top_logprobs
    return out


def _logprobs(choice: dict[str, Any]) -> list[TokenLogprob] | None:
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None
    return [
        TokenLogprob(
            token=item.get("token", ""),
            logprob=float(item.get("logprob", 0.0)),
            top_logprobs=[
                TopLogprob(token=alt.get("token", ""), logprob=float(alt.get("logprob", 0.0)))
                for alt in item.get("top_logprobs") or []
            ],
        )
        for item in content
    ]


def response_from_dict(data: dict[str, Any], *, model: str, latency_ms: float) -> ChatResponse:
    """Read one non-streaming chat completion (a dict in OpenAI's shape)."""
    choices = data.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    usage = data.get("usage") or {}
    return ChatResponse(
        text=message.get("content") or "",
        model=model,
        usage=Usage(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        ),
        latency_ms=latency_ms,
        logprobs=_logprobs(choice),
        finish_reason=choice.get("finish_reason"),
        timings=_timings(data.get("timings")),
    )


def _timings(raw: object) -> dict[str, float] | None:
    if not isinstance(raw, dict):
        return None
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)} or None


def delta_text(chunk: dict[str, Any]) -> str:
    """The text a streaming chunk adds (empty for role, usage and finish chunks)."""
    return "".join((c.get("delta") or {}).get("content") or "" for c in chunk.get("choices") or [])
