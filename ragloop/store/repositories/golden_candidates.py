"""The golden set's review queue (`golden_candidates`).

A machine proposes (`propose`: the nightly nomination, the adversarial generator); a person decides
(`approve`, `reject`). Approval inserts the golden entry and marks the candidate in one transaction
and one golden-set version, so an approved candidate without its entry (or an entry without its
approval) cannot exist. Deciding is a conditional UPDATE on `status = 'pending'`: two reviewers
approving at once produce one entry, and the second gets a conflict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ragloop.store.db import Database
from ragloop.store.golden_models import GoldenCandidate
from ragloop.store.models import Answer, Evaluation, GoldenSetEntry, Query, UserFeedback, new_id, utcnow
from ragloop.store.repositories._base import NotFoundError, StoreConflictError, _serialize
from ragloop.store.repositories.golden import GOLDEN_LOCK, GoldenSet, NewEntry
from ragloop.store.repositories.queries import question_hash
from ragloop.store.vocabulary import MACHINE_SOURCES, CandidateStatus, EvaluationStatus, GoldenChange, Tier


@dataclass(frozen=True)
class Proposal:
    question: str
    proposed_answer: str
    source: str
    generator: str | None = None
    answer_id: str | None = None
    required_doc_ids: Sequence[str] = ()
    required_chunk_ids: Sequence[str] = ()
    difficulty: str = "standard"
    domain_tags: Sequence[str] = ()
    evidence: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class NominationFacts:
    """What the nomination rule reads about one answer: its question, text, citations, ratings and
    the latest completed tier-1 and tier-2 evaluations (None where there is none)."""

    answer_id: str
    question: str
    answer_text: str
    refused: bool
    doc_ids: list[str]
    chunk_ids: list[str]
    positive: int
    negative: int
    heuristic: Evaluation | None
    judge: Evaluation | None
    answered_at: datetime


class GoldenCandidates:
    def __init__(self, db: Database, golden: GoldenSet) -> None:
        self.db = db
        self.golden = golden

    def propose(self, proposals: Sequence[Proposal]) -> list[GoldenCandidate]:
        """Queue what is new; a question already proposed (whatever became of it) or already live in
        the golden set is skipped, so a nightly run can be repeated. Returns the rows inserted."""
        for p in proposals:
            if p.source not in MACHINE_SOURCES:
                raise ValueError(f"only machine sources are reviewed ({', '.join(MACHINE_SOURCES)}), not {p.source!r}")
        out: list[GoldenCandidate] = []
        with self.db.transaction() as s:
            live = {
                question_hash(q)
                for q in s.scalars(select(GoldenSetEntry.question).where(GoldenSetEntry.deprecated_at.is_(None)))
            }
            ins = pg_insert if s.get_bind().dialect.name == "postgresql" else sqlite_insert
            for p in proposals:
                key = question_hash(p.question)
                if key in live:
                    continue
                cid = new_id()
                stmt = (
                    ins(GoldenCandidate)
                    .values(
                        candidate_id=cid,
                        question=p.question.strip(),
                        question_key=key,
                        proposed_answer=p.proposed_answer,
                        source=str(p.source),
                        generator=p.generator,
                        answer_id=p.answer_id,
                        required_doc_ids=list(p.required_doc_ids),
                        required_chunk_ids=list(p.required_chunk_ids),
                        difficulty=str(p.difficulty),
                        domain_tags=list(p.domain_tags),
                        evidence=dict(p.evidence or {}),
                        status=CandidateStatus.PENDING,
                        created_at=utcnow(),
                    )
                    .on_conflict_do_nothing(index_elements=["question_key"])
                    .returning(GoldenCandidate.candidate_id)
                )
                if s.execute(stmt).scalar() is not None:  # None: another writer proposed it first
                    row = s.get(GoldenCandidate, cid)
                    assert row is not None
                    out.append(row)
                live.add(key)
        return out

    def get(self, candidate_id: str) -> GoldenCandidate | None:
        with self.db.transaction(write=False) as s:
            return s.get(GoldenCandidate, candidate_id)

    def by_status(
        self, *, status: str | None = CandidateStatus.PENDING, limit: int = 100, offset: int = 0
    ) -> list[GoldenCandidate]:
        stmt = select(GoldenCandidate)
        if status is not None:
            stmt = stmt.where(GoldenCandidate.status == status)
        stmt = stmt.order_by(GoldenCandidate.created_at, GoldenCandidate.candidate_id).limit(limit).offset(offset)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt))

    def count(self, status: str = CandidateStatus.PENDING) -> int:
        with self.db.transaction(write=False) as s:
            return int(s.scalar(select(func.count()).where(GoldenCandidate.status == status)) or 0)

    def _decide(
        self, candidate_id: str, status: CandidateStatus, reviewer: str, note: str | None, **extra: Any
    ) -> None:
        with self.db.transaction() as s:
            res = s.execute(
                update(GoldenCandidate)
                .where(GoldenCandidate.candidate_id == candidate_id, GoldenCandidate.status == CandidateStatus.PENDING)
                .values(status=status, reviewed_by=reviewer, reviewed_at=utcnow(), review_note=note, **extra)
            )
            if res.rowcount == 0:  # type: ignore[attr-defined]
                row = s.get(GoldenCandidate, candidate_id)
                if row is None:
                    raise NotFoundError(f"no golden candidate {candidate_id!r}")
                raise StoreConflictError(
                    f"golden candidate {candidate_id} was already {row.status} by {row.reviewed_by}"
                )

    def approve(
        self,
        candidate_id: str,
        *,
        reviewer: str,
        expected_answer: str | None = None,
        question: str | None = None,
        held_out: bool,
        note: str | None = None,
    ) -> tuple[GoldenCandidate, GoldenSetEntry]:
        """Insert the golden entry (approved now, by `reviewer`) and close the candidate, atomically.
        `expected_answer` is the reviewer's edit; None confirms the proposed answer as read."""
        with self.db.transaction() as s:
            cand = s.get(GoldenCandidate, candidate_id)
            if cand is None:
                raise NotFoundError(f"no golden candidate {candidate_id!r}")
            _serialize(s, GOLDEN_LOCK)  # the set's writers wait: the live check below stays true until commit
            final_q = (question or cand.question).strip()
            live = s.scalars(select(GoldenSetEntry.question).where(GoldenSetEntry.deprecated_at.is_(None)))
            if cand.status == CandidateStatus.PENDING and question_hash(final_q) in {question_hash(q) for q in live}:
                raise StoreConflictError(f"{final_q!r} is already in the golden set: reject this candidate instead")
            answer = cand.proposed_answer if expected_answer is None else expected_answer
            edited = expected_answer is not None and expected_answer.strip() != cand.proposed_answer.strip()
            self._decide(candidate_id, CandidateStatus.APPROVED, reviewer, note, answer_edited=edited)
            entry = self.golden.add_golden_entries(
                [
                    NewEntry(
                        question=final_q,
                        expected_answer=answer,
                        source=cand.source,
                        required_chunk_ids=tuple(cand.required_chunk_ids or ()),
                        required_doc_ids=tuple(cand.required_doc_ids or ()),
                        difficulty=cand.difficulty,
                        domain_tags=tuple(cand.domain_tags or ()),
                        held_out=held_out,
                        approved_at=utcnow(),
                    )
                ],
                created_by=reviewer,
                kind=GoldenChange.APPROVE,
                note=f"candidate {candidate_id} ({cand.source}{', answer edited' if edited else ''})",
            )[0]
            s.execute(
                update(GoldenCandidate)
                .where(GoldenCandidate.candidate_id == candidate_id)
                .values(entry_id=entry.entry_id)
            )
            s.flush()
            s.refresh(cand)
            return cand, entry

    def reject(self, candidate_id: str, *, reviewer: str, note: str | None = None) -> GoldenCandidate:
        self._decide(candidate_id, CandidateStatus.REJECTED, reviewer, note)
        got = self.get(candidate_id)
        assert got is not None
        return got

    def nomination_facts(
        self, *, since: datetime, min_positive: int, until: datetime | None = None
    ) -> list[NominationFacts]:
        """Answers created in [since, until) (None: no upper bound) with at least `min_positive`
        positive ratings, with their ratings and latest completed tier-1 / tier-2 evaluations. The
        thresholds on the scores are the caller's rule (`ragloop.experiments.golden_review`); this only gathers."""
        with self.db.transaction(write=False) as s:
            rated = s.execute(
                select(
                    UserFeedback.answer_id,
                    func.count().filter(UserFeedback.rating == "positive"),
                    func.count().filter(UserFeedback.rating == "negative"),
                ).group_by(UserFeedback.answer_id)
            ).all()
            counts = {a: (int(p), int(n)) for a, p, n in rated if int(p) >= min_positive}
            if not counts:
                return []
            rows = s.execute(
                select(Answer, Query.question_text)
                .join(Query, Query.query_id == Answer.query_id)
                .where(
                    Answer.answer_id.in_(list(counts)),
                    Answer.created_at >= since,
                    *([Answer.created_at < until] if until is not None else []),
                )
            ).all()
            evals = s.scalars(
                select(Evaluation)
                .where(
                    Evaluation.answer_id.in_([a.answer_id for a, _ in rows]),
                    Evaluation.status == EvaluationStatus.COMPLETED,
                    Evaluation.evaluation_tier.in_([Tier.HEURISTIC, Tier.LLM_JUDGE]),
                )
                .order_by(Evaluation.evaluated_at)
            ).all()
        latest: dict[tuple[str, str], Evaluation] = {}
        for e in evals:  # oldest first: the last one wins
            latest[(e.answer_id, e.evaluation_tier)] = e
        out = []
        for a, q in rows:
            cites = [c for c in (a.citations or []) if isinstance(c, dict)]
            out.append(
                NominationFacts(
                    answer_id=a.answer_id,
                    question=q,
                    answer_text=a.answer_text,
                    refused=a.refused,
                    doc_ids=list(dict.fromkeys(str(c["doc_id"]) for c in cites if c.get("doc_id"))),
                    chunk_ids=list(dict.fromkeys(str(c["chunk_id"]) for c in cites if c.get("chunk_id"))),
                    positive=counts[a.answer_id][0],
                    negative=counts[a.answer_id][1],
                    heuristic=latest.get((a.answer_id, Tier.HEURISTIC)),
                    judge=latest.get((a.answer_id, Tier.LLM_JUDGE)),
                    answered_at=a.created_at,
                )
            )
        return sorted(out, key=lambda f: (f.answered_at, f.answer_id))

    def recent_questions(self, since: datetime, *, limit: int = 5000) -> list[tuple[str, str, int]]:
        """(question_hash, one wording, how often asked) of production queries since `since`, most
        asked first, at most `limit` distinct questions (the coverage measurement's sample)."""
        stmt = (
            select(Query.question_hash, func.min(Query.question_text), func.count())
            .where(Query.created_at >= since)
            .group_by(Query.question_hash)
            .order_by(func.count().desc(), Query.question_hash)
            .limit(limit)
        )
        with self.db.transaction(write=False) as s:
            return [(k, q, int(n)) for k, q, n in s.execute(stmt).all()]

    def served_answers(self, question_keys: Sequence[str]) -> dict[str, tuple[str, list[str], list[str]]]:
        """The latest non-refused answer served to each question: (text, cited doc ids, chunk ids)."""
        if not question_keys:
            return {}
        stmt = (
            select(Query.question_hash, Answer)
            .join(Answer, Answer.query_id == Query.query_id)
            .where(Query.question_hash.in_(list(question_keys)), Answer.refused.is_(False))
            .order_by(Answer.created_at)
        )
        out: dict[str, tuple[str, list[str], list[str]]] = {}
        with self.db.transaction(write=False) as s:
            for key, a in s.execute(stmt).all():  # oldest first: the last one wins
                cites = [c for c in (a.citations or []) if isinstance(c, dict)]
                out[key] = (
                    a.answer_text,
                    list(dict.fromkeys(str(c["doc_id"]) for c in cites if c.get("doc_id"))),
                    list(dict.fromkeys(str(c["chunk_id"]) for c in cites if c.get("chunk_id"))),
                )
        return out
