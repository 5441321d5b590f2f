"""Helpers shared by the routes: ownership checks and row → schema conversions."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import HTTPException

from ragloop.service.auth import Caller
from ragloop.service.schemas import EvaluationPublic
from ragloop.service.state import ServiceState
from ragloop.store import Answer, Evaluation, Query

ID_PATTERN = r"^[0-9a-f]{32}$"


async def owned_answer(svc: ServiceState, caller: Caller, answer_id: str) -> tuple[Answer, Query]:
    """The answer and its query if `caller` may see it (its own, or any for an admin); 404 otherwise
    (never 403: an id that exists but is someone else's looks exactly like one that does not).
    An answer is stored before its id is handed out, so there is nothing to wait for."""

    def load() -> tuple[Answer | None, Query | None]:
        return svc.store.queries.get_answer(answer_id), svc.store.queries.query_for_answer(answer_id)

    answer, query = await asyncio.to_thread(load)
    if answer is None or query is None or not (caller.is_admin or query.user_id == caller.key_id):
        raise HTTPException(404, f"no answer {answer_id!r}")
    return answer, query


def evaluation_public(row: Evaluation) -> EvaluationPublic:
    return EvaluationPublic.model_validate(row)


def answer_citations(answer: Answer) -> list[dict[str, Any]]:
    return [
        {
            "n": int(c.get("n", i + 1)),
            "chunk_id": str(c.get("chunk_id", "")),
            "doc_id": str(c.get("doc_id", "")),
            "title": str(c.get("title", "")),
            "excerpt": str(c.get("excerpt", "")),
            "score": float(c.get("score", 0.0)),
        }
        for i, c in enumerate(answer.citations or [])
    ]
