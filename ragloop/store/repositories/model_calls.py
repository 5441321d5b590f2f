"""Model calls with tokens, latency and cost: the one call log and cost ledger. Every production model
call is written here by `ragloop.models.chat.calllog.Logged`, for which this repository is the sink
(`record` takes the one typed `ragloop.calls.CallRecord`; the model layer never imports the store)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Literal

from sqlalchemy import case, func, null, select, update

from ragloop.calls import CallRecord
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
    cached: int = 0
    purpose: str | None = None
    """Set when the totals are per (model, purpose): `usage(by="purpose")`."""
    model_s: float = 0.0
    """Seconds the paid calls took (cache hits replay the original latency and are left out): where a
    local model's time goes."""


class ModelCalls:
    """Every model call (chat, judge, scorer) with tokens, latency and cost."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, call: CallRecord) -> ModelCall:
        """Store one call (a `CallSink`: `Logged` hands each call here)."""
        with self.db.transaction() as s:
            row = ModelCall(**{f.name: getattr(call, f.name) for f in fields(CallRecord)})
            s.add(row)
            s.flush()
            return row

    def link(self, answer_id: str, *, run_id: str) -> int:
        """Attribute the calls logged under `run_id` (made before the answer existed) to `answer_id`; joins the
        caller's transaction, so the answer and its calls' link commit together. Returns the rows linked."""
        with self.db.transaction() as s:
            stmt = update(ModelCall).where(ModelCall.run_id == run_id, ModelCall.answer_id.is_(None))
            result = s.execute(stmt.values(answer_id=answer_id).execution_options(synchronize_session=False))
            return int(getattr(result, "rowcount", 0) or 0)

    def for_answer(self, answer_id: str) -> list[ModelCall]:
        """Every call made for the answer (its graph's, its judge's, its diagnosis's), oldest first."""
        with self.db.transaction(write=False) as s:
            stmt = select(ModelCall).where(ModelCall.answer_id == answer_id)
            return list(s.scalars(stmt.order_by(ModelCall.created_at, ModelCall.call_id)))

    def for_run(self, run_id: str) -> list[ModelCall]:
        with self.db.transaction(write=False) as s:
            stmt = select(ModelCall).where(ModelCall.run_id == run_id)
            return list(s.scalars(stmt.order_by(ModelCall.created_at, ModelCall.call_id)))

    def recent(self, *, limit: int = 100, purpose: str | None = None) -> list[ModelCall]:
        """The latest calls, newest first."""
        stmt = select(ModelCall)
        if purpose is not None:
            stmt = stmt.where(ModelCall.purpose == purpose)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(ModelCall.created_at.desc(), ModelCall.call_id.desc()).limit(limit)))

    def usage(self, *, since: datetime | None = None, by: Literal["model", "purpose"] = "model") -> list[ModelUsage]:
        """Totals per model (or per model and purpose): every call counts, tokens and seconds only where
        they were spent (not cache hits)."""
        paid = ModelCall.cached.is_(False)
        keys = (ModelCall.model,) if by == "model" else (ModelCall.model, ModelCall.purpose)
        stmt = select(
            ModelCall.model,
            ModelCall.purpose if by == "purpose" else null(),
            func.count(),
            func.coalesce(func.sum(case((paid, ModelCall.prompt_tokens), else_=0)), 0),
            func.coalesce(func.sum(case((paid, ModelCall.completion_tokens), else_=0)), 0),
            func.coalesce(func.sum(ModelCall.cost_usd), 0.0),
            func.count(ModelCall.error),
            func.coalesce(func.sum(case((ModelCall.cached.is_(True), 1), else_=0)), 0),
            func.coalesce(func.sum(case((paid, ModelCall.latency_ms), else_=0.0)), 0.0),
        ).group_by(*keys)
        if since is not None:
            stmt = stmt.where(ModelCall.created_at >= since)
        with self.db.transaction(write=False) as s:
            rows = s.execute(stmt.order_by(*keys)).all()
        return [
            ModelUsage(
                r[0], int(r[2]), int(r[3]), int(r[4]), float(r[5] or 0.0), int(r[6]), int(r[7]),
                purpose=r[1], model_s=float(r[8] or 0.0) / 1000,
            )
            for r in rows
        ]  # fmt: skip
