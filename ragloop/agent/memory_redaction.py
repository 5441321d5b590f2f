"""Checkpoints without personal data: a saver subclass that redacts what it is asked to write.

The answer graph runs on the question as the user wrote it (the answer is unchanged), but LangGraph
checkpoints its state (the messages, the question, the drafts, the trace) into SQLite under
`RAGLOOP_HOME` or into PostgreSQL. The PostgreSQL saver keeps string channels inline in its JSONB
column, outside the serializer, so wrapping the serializer would miss them: the seam is the saver's
`aput` / `aput_writes`, which every backend's synchronous methods call too. The values are copied,
never mutated (LangGraph keeps using its own), and a conversation's next turn reads the redacted
history back: a follow-up sees `[EMAIL]` where the user's address was.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from ragloop.text.pii import Redactor


class _Redacting:
    """Mixed in before a LangGraph saver class (see `redacting_saver`)."""

    redactor: Redactor

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        red = self.redactor
        if red.enabled:
            checkpoint = {**checkpoint, "channel_values": red.redact_deep(checkpoint.get("channel_values", {}))}
            metadata = red.redact_deep(metadata)
        return await super().aput(config, checkpoint, metadata, new_versions)  # type: ignore[misc]

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> Any:
        red = self.redactor
        if red.enabled:
            writes = [(channel, red.redact_deep(value)) for channel, value in writes]
        return await super().aput_writes(config, writes, task_id, task_path)  # type: ignore[misc]


@cache
def redacting(cls: type) -> Any:
    """`cls` (a LangGraph saver class) with its writes redacted: set `redactor` on each instance."""
    return type(f"Redacting{cls.__name__}", (_Redacting, cls), {})


def redacting_saver(cls: type, redactor: Redactor, *args: Any, **kwargs: Any) -> Any:
    """An instance of `redacting(cls)` built with `args` / `kwargs`, redacting with `redactor`."""
    saver = redacting(cls)(*args, **kwargs)
    saver.redactor = redactor
    return saver
