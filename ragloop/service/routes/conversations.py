"""Conversations (sessions) of the calling key: list, read, delete."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query
from sqlalchemy import select

from ragloop.service.answering import public_session, stored_session
from ragloop.service.deps import CallerDep, ServiceDep
from ragloop.service.routes._common import answer_citations
from ragloop.service.schemas import (
    SESSION_PATTERN,
    CitationPublic,
    ConversationPublic,
    ConversationSummary,
    Deleted,
    Turn,
)
from ragloop.store import Answer
from ragloop.store import Query as QueryRow

router = APIRouter(tags=["conversations"])
SessionId = Annotated[str, Path(pattern=SESSION_PATTERN, description="The session id used in `/v1/query`.")]


@router.get("/v1/conversations", response_model=list[ConversationSummary], summary="Your conversations")
def list_conversations(
    svc: ServiceDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> list[ConversationSummary]:
    rows = svc.store.queries.list_sessions(user_id=caller.key_id, limit=limit, offset=offset)
    return [
        ConversationSummary(
            session_id=public_session(caller, r.session_id), turns=r.turns, first_at=r.first_at, last_at=r.last_at
        )
        for r in rows
    ]


@router.get(
    "/v1/conversations/{session_id}",
    response_model=ConversationPublic,
    responses={404: {"description": "No such conversation."}},
    summary="One conversation, turn by turn",
)
async def get_conversation(session_id: SessionId, svc: ServiceDep, caller: CallerDep) -> ConversationPublic:
    stored = stored_session(caller, session_id)

    def load() -> list[Turn]:
        with svc.store.db.transaction(write=False) as s:
            rows = s.execute(
                select(QueryRow.question_text, Answer)
                .join(Answer, Answer.query_id == QueryRow.query_id)
                .where(QueryRow.session_id == stored, QueryRow.user_id == caller.key_id)
                .order_by(Answer.created_at, Answer.answer_id)
            ).all()
        return [
            Turn(
                answer_id=a.answer_id,
                question=q,
                answer=a.answer_text,
                citations=[CitationPublic.model_validate(c) for c in answer_citations(a)],
                refused=a.refused,
                created_at=a.created_at,
            )
            for q, a in rows
        ]

    turns = await asyncio.to_thread(load)
    if not turns:
        raise HTTPException(404, f"no conversation {session_id!r}")
    return ConversationPublic(session_id=session_id, turns=turns)


@router.delete(
    "/v1/conversations/{session_id}",
    response_model=Deleted,
    responses={404: {"description": "No such conversation."}},
    summary="Delete a conversation (its memory, messages, answers and their evaluations)",
)
async def delete_conversation(session_id: SessionId, svc: ServiceDep, caller: CallerDep) -> Deleted:
    stored = stored_session(caller, session_id)
    memory = svc.agents.memory  # the graph's memory: checkpoints and the full message log

    def count() -> tuple[int, int]:
        with svc.store.db.transaction(write=False) as s:
            n = len(s.scalars(select(QueryRow.query_id).where(QueryRow.session_id == stored)).all())
        return n, len(memory.log.messages(stored))

    answers, messages = await asyncio.to_thread(count)
    if not answers and not messages:
        raise HTTPException(404, f"no conversation {session_id!r}")
    await memory.forget(stored)

    def forget() -> int:
        return svc.store.queries.delete_session(stored)

    deleted = await asyncio.to_thread(forget)
    return Deleted(deleted=True, answers_deleted=deleted)
