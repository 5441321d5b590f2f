"""One model call as the call log keeps it: the record the model layer writes and the store stores.

A leaf module (standard library only) because two layers that must not import each other share
it: `ragloop.models.chat.calllog.Logged` builds a `CallRecord` per call and hands it whole to a
`CallSink`; the store's `ModelCalls` repository is one (`store.model_calls.record(call)`), the CLI's
lazily opened `StoreCallLog` another, `MemorySink` (tests) a third. One typed record instead of the
same thirteen keyword arguments spelled in each of them: a field added here reaches every sink,
and a sink that forgets it fails the type check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class CallRecord:
    """One model call: what was asked and answered, what it cost, and who it was for."""

    model: str
    purpose: str
    prompt: list[Any] = field(default_factory=list)
    """The chat messages (`{"role": ..., "content": ...}`); `user_prompt(text)` for a plain string."""
    response: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float | None = None
    cost_usd: float | None = None
    answer_id: str | None = None
    """A stored answer (the log's foreign key); before it is stored, `run_id` and `ModelCalls.link`."""
    run_id: str | None = None
    error: str | None = None
    cached: bool = False
    step: str | None = None


def user_prompt(text: str) -> list[dict[str, str]]:
    """A plain prompt as the one user message the log stores."""
    return [{"role": "user", "content": text}]


class CallSink(Protocol):
    """Where `Logged` writes each call."""

    def record(self, call: CallRecord) -> object: ...
