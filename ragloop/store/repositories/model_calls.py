"""Model calls with tokens, latency and cost. Its own module because it is the cost ledger: written by
every model client and read only for usage totals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from ragloop.store.db import Database
from ragloop.store.models import ModelCall


@dataclass(frozen=True)
class ModelUsage:
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    errors: int


class ModelCalls:
    """Every model call (chat, judge, scorer) with tokens, latency and cost."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self,
        *,
        model: str,
        purpose: str,
        prompt: str | Sequence[Any] = (),
        response: str | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        latency_ms: float | None = None,
        cost_usd: float | None = None,
        answer_id: str | None = None,
        run_id: str | None = None,
        error: str | None = None,
    ) -> ModelCall:
        """`prompt` is the message list (a plain string is stored as one user message)."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        with self.db.transaction() as s:
            row = ModelCall(
                model=model,
                purpose=purpose,
                prompt=messages,
                response=response,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                latency_ms=latency_ms,
                cost_usd=cost_usd,
                answer_id=answer_id,
                run_id=run_id,
                error=error,
            )
            s.add(row)
            s.flush()
            return row

    def for_answer(self, answer_id: str) -> list[ModelCall]:
        with self.db.transaction(write=False) as s:
            stmt = select(ModelCall).where(ModelCall.answer_id == answer_id)
            return list(s.scalars(stmt.order_by(ModelCall.created_at, ModelCall.call_id)))

    def usage(self, *, since: datetime | None = None) -> list[ModelUsage]:
        """Totals per model."""
        stmt = select(
            ModelCall.model,
            func.count(),
            func.coalesce(func.sum(ModelCall.prompt_tokens), 0),
            func.coalesce(func.sum(ModelCall.completion_tokens), 0),
            func.coalesce(func.sum(ModelCall.cost_usd), 0.0),
            func.count(ModelCall.error),
        ).group_by(ModelCall.model)
        if since is not None:
            stmt = stmt.where(ModelCall.created_at >= since)
        with self.db.transaction(write=False) as s:
            rows = s.execute(stmt.order_by(ModelCall.model)).all()
        return [ModelUsage(r[0], int(r[1]), int(r[2]), int(r[3]), float(r[4] or 0.0), int(r[5])) for r in rows]
