"""Served questions and their answers. One module because a query and its answer are always written
together, in one transaction, and deleted together with their conversation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select

from ragloop.store.db import Database
from ragloop.store.models import Answer, Query, new_id, utcnow
from ragloop.store.repositories._base import _sha256


def question_hash(question: str) -> str:
    """SHA-256 of the question with case and whitespace normalised: groups repeats of one question."""
    return _sha256(" ".join(question.lower().split()))


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    turns: int
    first_at: datetime
    last_at: datetime


class QueryLog:
    """`queries` and `answers` (one answer per query, written together)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record_answer(
        self,
        *,
        session_id: str,
        question: str,
        answer_text: str,
        pipeline_version: str,
        citations: Sequence[Mapping[str, Any]] = (),
        confidence: float | None = None,
        refused: bool = False,
        termination_reason: str | None = None,
        residual_deficiencies: Sequence[Any] = (),
        trace: Mapping[str, Any] | None = None,
        latency_ms: int | None = None,
        token_count: int | None = None,
        retrieved_chunk_ids: Sequence[str] = (),
        retrieval_scores: Sequence[float] = (),
        user_id: str | None = None,
        experiment_id: str | None = None,
        variant: str | None = None,
        answer_id: str | None = None,
    ) -> Answer:
        """Store one served question and its answer; returns the answer (its `query_id` names the query)."""
        query_id, answer_id = new_id(), answer_id or new_id()
        now = utcnow()
        with self.db.transaction() as s:
            s.add(
                Query(
                    query_id=query_id,
                    session_id=session_id,
                    user_id=user_id,
                    question_text=question,
                    question_hash=question_hash(question),
                    answer_id=answer_id,
                    experiment_id=experiment_id,
                    variant=variant,
                    pipeline_version=pipeline_version,
                    retrieved_chunk_ids=list(retrieved_chunk_ids),
                    retrieval_scores=[float(x) for x in retrieval_scores],
                    latency_ms=latency_ms,
                    created_at=now,
                )
            )
            s.flush()
            answer = Answer(
                answer_id=answer_id,
                query_id=query_id,
                session_id=session_id,
                answer_text=answer_text,
                answer_hash=_sha256(answer_text),
                citations=[dict(c) for c in citations],
                citation_count=len(citations),
                token_count=token_count,
                confidence=confidence,
                refused=refused,
                termination_reason=termination_reason,
                residual_deficiencies=list(residual_deficiencies),
                trace=dict(trace or {}),
                pipeline_version=pipeline_version,
                latency_ms=latency_ms,
                created_at=now,
            )
            s.add(answer)
            s.flush()
            return answer

    def get_answer(self, answer_id: str) -> Answer | None:
        with self.db.transaction(write=False) as s:
            return s.get(Answer, answer_id)

    def get_query(self, query_id: str) -> Query | None:
        with self.db.transaction(write=False) as s:
            return s.get(Query, query_id)

    def query_for_answer(self, answer_id: str) -> Query | None:
        with self.db.transaction(write=False) as s:
            return s.scalar(
                select(Query).join(Answer, Answer.query_id == Query.query_id).where(Answer.answer_id == answer_id)
            )

    def answers_with_questions(self, answer_ids: Sequence[str]) -> dict[str, tuple[Answer, str]]:
        """answer id -> (the answer, its question's text), for the ids that exist."""
        with self.db.transaction(write=False) as s:
            rows = s.execute(
                select(Answer, Query.question_text)
                .join(Query, Query.query_id == Answer.query_id)
                .where(Answer.answer_id.in_(list(answer_ids)))
            ).all()
            return {answer.answer_id: (answer, question) for answer, question in rows}

    def session_answers(self, session_id: str) -> list[Answer]:
        """A conversation's answers, oldest first."""
        with self.db.transaction(write=False) as s:
            stmt = select(Answer).where(Answer.session_id == session_id).order_by(Answer.created_at, Answer.answer_id)
            return list(s.scalars(stmt))

    def list_sessions(self, *, user_id: str | None = None, limit: int = 50, offset: int = 0) -> list[SessionSummary]:
        """Conversations, most recently active first."""
        stmt = select(Query.session_id, func.count(), func.min(Query.created_at), func.max(Query.created_at)).group_by(
            Query.session_id
        )
        if user_id is not None:
            stmt = stmt.where(Query.user_id == user_id)
        stmt = stmt.order_by(func.max(Query.created_at).desc(), Query.session_id).limit(limit).offset(offset)
        with self.db.transaction(write=False) as s:
            rows = s.execute(stmt).all()
        return [SessionSummary(r[0], int(r[1]), r[2], r[3]) for r in rows]

    def delete_session(self, session_id: str) -> int:
        """Delete a conversation's queries and answers; their evaluations, feedback and evaluation jobs go
        with them (ON DELETE CASCADE) and their model calls are kept, detached. Returns the number of
        answers deleted. Golden-set entries and the audit log are never touched."""
        with self.db.transaction() as s:
            n = s.scalar(select(func.count()).select_from(Answer).where(Answer.session_id == session_id)) or 0
            s.execute(delete(Query).where(Query.session_id == session_id))
            return int(n)
