"""The knowledge-gap log: groups of similar questions a collection cannot answer.

The grouping decision (which group a new question joins) is made by `ragloop.improve.gaps`; this
repository stores the groups and makes "read the groups, then join one or start one" atomic:
`exclusive(collection)` holds a per-collection lock (an advisory lock on PostgreSQL, the write lock
on SQLite) so two diagnosis workers logging the same new gap at once make one group, not two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ragloop.store.db import Database
from ragloop.store.improve_models import KNOWLEDGE_GAP_STATUSES, KnowledgeGap
from ragloop.store.models import utcnow
from ragloop.store.repositories._base import _require, _serialize
from ragloop.store.vocabulary import GapStatus

MAX_MEMBERS = 50
"""Member questions, example answers and ideal answers kept per group (the count keeps counting)."""


def _capped(old: Sequence[Any], new: Any) -> list[Any]:
    out = list(old)
    if new is not None and new not in out and len(out) < MAX_MEMBERS:
        out.append(new)
    return out


class KnowledgeGaps:
    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    @contextmanager
    def exclusive(self, collection: str) -> Iterator[Session]:
        """A write transaction holding the collection's gap lock; calls inside it join it."""
        with self.db.transaction() as s:
            _serialize(s, f"knowledge_gaps:{collection}")
            yield s

    def open_for(self, collection: str) -> list[KnowledgeGap]:
        """The open groups of a collection, most recently seen first."""
        stmt = (
            select(KnowledgeGap)
            .where(KnowledgeGap.collection == collection, KnowledgeGap.status == GapStatus.OPEN)
            .order_by(KnowledgeGap.last_seen_at.desc(), KnowledgeGap.gap_id)
        )
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt))

    def add(
        self,
        collection: str,
        question: str,
        *,
        answer_id: str | None,
        ideal_answer: str | None,
        vector: Sequence[float] | None,
        embedder: str | None,
        generated_questions: Sequence[str],
        generated_by: str | None,
        best_chunk_id: str | None,
        best_score: float | None,
        evidence: Mapping[str, Any] | None = None,
    ) -> KnowledgeGap:
        """A new group with one member."""
        now = self.clock()
        row = KnowledgeGap(
            collection=collection,
            representative_question=question,
            vector=[float(x) for x in vector] if vector is not None else None,
            embedder=embedder,
            count=1,
            questions=[question],
            answer_ids=[answer_id] if answer_id else [],
            ideal_answers=[ideal_answer] if ideal_answer else [],
            generated_questions=list(generated_questions),
            generated_by=generated_by,
            best_chunk_id=best_chunk_id,
            best_score=best_score,
            evidence=dict(evidence or {}),
            status=GapStatus.OPEN,
            first_seen_at=now,
            last_seen_at=now,
        )
        with self.db.transaction() as s:
            s.add(row)
            s.flush()
            return row

    def add_occurrence(
        self,
        gap_id: str,
        question: str,
        *,
        answer_id: str | None,
        ideal_answer: str | None,
        generated_questions: Sequence[str] = (),
        best_chunk_id: str | None = None,
        best_score: float | None = None,
    ) -> KnowledgeGap:
        """One more question in a group: counted; kept as a member (capped); the best chunk is the best
        one seen for any member; new generated questions are added."""
        with self.db.transaction() as s:
            row: KnowledgeGap = _require(s, KnowledgeGap, gap_id)
            if answer_id is not None and answer_id in row.answer_ids:
                return row  # the same answer logged twice (a replayed diagnosis) counts once
            row.count += 1
            row.questions = _capped(row.questions, question)
            row.answer_ids = _capped(row.answer_ids, answer_id)
            row.ideal_answers = _capped(row.ideal_answers, ideal_answer or None)
            merged = list(row.generated_questions)
            for g in generated_questions:
                if g not in merged and len(merged) < MAX_MEMBERS:
                    merged.append(g)
            row.generated_questions = merged
            if best_score is not None and (row.best_score is None or best_score > row.best_score):
                row.best_chunk_id, row.best_score = best_chunk_id, best_score
            row.last_seen_at = self.clock()
            s.flush()
            return row

    def set_status(self, gap_id: str, status: str) -> KnowledgeGap:
        if status not in KNOWLEDGE_GAP_STATUSES:
            raise ValueError(f"unknown knowledge-gap status {status!r}; expected {KNOWLEDGE_GAP_STATUSES}")
        with self.db.transaction() as s:
            row: KnowledgeGap = _require(s, KnowledgeGap, gap_id)
            row.status = status
            s.flush()
            return row

    def get(self, gap_id: str) -> KnowledgeGap | None:
        with self.db.transaction(write=False) as s:
            return s.get(KnowledgeGap, gap_id)

    def for_answer(self, answer_id: str, collection: str | None = None) -> KnowledgeGap | None:
        """The group an answer was logged in (JSON membership is read in Python: it differs by backend)."""
        stmt = select(KnowledgeGap)
        if collection is not None:
            stmt = stmt.where(KnowledgeGap.collection == collection)
        with self.db.transaction(write=False) as s:
            return next((g for g in s.scalars(stmt) if answer_id in (g.answer_ids or [])), None)

    def listed(
        self, *, collection: str | None = None, status: str | None = GapStatus.OPEN, limit: int = 100, offset: int = 0
    ) -> list[KnowledgeGap]:
        """Largest groups first, then most recently seen."""
        stmt = select(KnowledgeGap)
        if collection is not None:
            stmt = stmt.where(KnowledgeGap.collection == collection)
        if status is not None:
            stmt = stmt.where(KnowledgeGap.status == status)
        stmt = stmt.order_by(KnowledgeGap.count.desc(), KnowledgeGap.last_seen_at.desc(), KnowledgeGap.gap_id)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.limit(limit).offset(offset)))

    def count(self, *, status: str | None = GapStatus.OPEN) -> int:
        stmt = select(func.count()).select_from(KnowledgeGap)
        if status is not None:
            stmt = stmt.where(KnowledgeGap.status == status)
        with self.db.transaction(write=False) as s:
            return int(s.scalar(stmt) or 0)
