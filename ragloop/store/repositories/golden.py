"""The versioned golden set. Its own module because it has its own invariant (insert + deprecate,
never update) and its own notion of a version."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, or_, select

from ragloop.store.db import Database
from ragloop.store.models import GoldenSetEntry, new_id, utcnow
from ragloop.store.repositories._base import NotFoundError, StoreConflictError


class GoldenSet:
    """Versioned golden questions: insert + deprecate, never update in place (a trigger enforces it).

    Each question has a `lineage_id` (its first version's `entry_id`); a revision inserts version n+1
    and marks version n `deprecated_at` / `superseded_by`. The golden-set version number
    (`golden_set_version()`) counts every insert and every deprecation, so it only grows, and
    `golden_set_as_of(t)` rebuilds the set any regression run saw.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def add_golden_entry(
        self,
        question: str,
        expected_answer: str,
        *,
        source: str,
        created_by: str,
        required_chunk_ids: Sequence[str] = (),
        required_doc_ids: Sequence[str] = (),
        difficulty: str = "standard",
        domain_tags: Sequence[str] = (),
        held_out: bool = False,
        approved_at: datetime | None = None,
    ) -> GoldenSetEntry:
        """A new question (version 1). `source` is human | auto_promoted | adversarial; `approved_at` is
        the human approval (auto-nominated entries should only be added once approved)."""
        entry_id = new_id()
        with self.db.transaction() as s:
            row = GoldenSetEntry(
                entry_id=entry_id,
                lineage_id=entry_id,
                version=1,
                question=question,
                expected_answer=expected_answer,
                required_chunk_ids=list(required_chunk_ids),
                required_doc_ids=list(required_doc_ids),
                source=source,
                difficulty=difficulty,
                domain_tags=list(domain_tags),
                held_out=held_out,
                created_by=created_by,
                approved_at=approved_at,
            )
            s.add(row)
            s.flush()
            return row

    def revise_golden_entry(
        self,
        old_id: str,
        *,
        created_by: str,
        question: str | None = None,
        expected_answer: str | None = None,
        required_chunk_ids: Sequence[str] | None = None,
        difficulty: str | None = None,
        domain_tags: Sequence[str] | None = None,
        held_out: bool | None = None,
        source: str | None = None,
        approved_at: datetime | None = None,
    ) -> GoldenSetEntry:
        """Insert the next version of `old_id` (fields not given are copied) and deprecate `old_id`,
        in one transaction. The new version is unapproved unless `approved_at` is given: an approval
        covers the text that was approved. Raises StoreConflictError if `old_id` is already deprecated."""
        with self.db.transaction() as s:
            old = s.scalar(select(GoldenSetEntry).where(GoldenSetEntry.entry_id == old_id).with_for_update())
            if old is None:
                raise NotFoundError(f"no golden_set_entries row {old_id!r}")
            if old.deprecated_at is not None:
                raise StoreConflictError(
                    f"golden entry {old_id} was deprecated at {old.deprecated_at.isoformat()}"
                    + (f" (superseded by {old.superseded_by})" if old.superseded_by else "")
                    + ": revise the current version"
                )
            new = GoldenSetEntry(
                entry_id=new_id(),
                lineage_id=old.lineage_id,
                version=old.version + 1,
                question=old.question if question is None else question,
                expected_answer=old.expected_answer if expected_answer is None else expected_answer,
                required_chunk_ids=list(old.required_chunk_ids if required_chunk_ids is None else required_chunk_ids),
                required_doc_ids=list(old.required_doc_ids),
                source=old.source if source is None else source,
                difficulty=old.difficulty if difficulty is None else difficulty,
                domain_tags=list(old.domain_tags if domain_tags is None else domain_tags),
                held_out=old.held_out if held_out is None else held_out,
                created_by=created_by,
                approved_at=approved_at,
            )
            s.add(new)
            s.flush()  # the new row must exist before the old one points at it
            old.deprecated_at = new.created_at
            old.superseded_by = new.entry_id
            s.flush()
            return new

    def deprecate_golden_entry(self, entry_id: str) -> GoldenSetEntry:
        """Retire a question without a successor (the golden-set form of a delete)."""
        with self.db.transaction() as s:
            row = s.scalar(select(GoldenSetEntry).where(GoldenSetEntry.entry_id == entry_id).with_for_update())
            if row is None:
                raise NotFoundError(f"no golden_set_entries row {entry_id!r}")
            if row.deprecated_at is not None:
                raise StoreConflictError(f"golden entry {entry_id} is already deprecated")
            row.deprecated_at = utcnow()
            s.flush()
            return row

    def get(self, entry_id: str) -> GoldenSetEntry | None:
        with self.db.transaction(write=False) as s:
            return s.get(GoldenSetEntry, entry_id)

    def current_golden_set(self, *, include_held_out: bool = True, approved_only: bool = False) -> list[GoldenSetEntry]:
        """The live version of every question, oldest question first. Nightly regressions pass
        `include_held_out=False` (the held-out share is for out-of-sample checks only)."""
        stmt = select(GoldenSetEntry).where(GoldenSetEntry.deprecated_at.is_(None))
        if not include_held_out:
            stmt = stmt.where(GoldenSetEntry.held_out.is_(False))
        if approved_only:
            stmt = stmt.where(GoldenSetEntry.approved_at.is_not(None))
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(GoldenSetEntry.created_at, GoldenSetEntry.entry_id)))

    def golden_set_as_of(self, when: datetime) -> list[GoldenSetEntry]:
        """The golden set as it stood at `when` (for re-running or explaining an old regression run)."""
        stmt = select(GoldenSetEntry).where(
            GoldenSetEntry.created_at <= when,
            or_(GoldenSetEntry.deprecated_at.is_(None), GoldenSetEntry.deprecated_at > when),
        )
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(GoldenSetEntry.created_at, GoldenSetEntry.entry_id)))

    def history(self, lineage_id: str) -> list[GoldenSetEntry]:
        """Every version of one question, version 1 first."""
        with self.db.transaction(write=False) as s:
            stmt = select(GoldenSetEntry).where(GoldenSetEntry.lineage_id == lineage_id)
            return list(s.scalars(stmt.order_by(GoldenSetEntry.version)))

    def golden_set_version(self) -> int:
        """A number that grows with every change to the golden set (inserts + deprecations)."""
        with self.db.transaction(write=False) as s:
            row = s.execute(select(func.count(), func.count(GoldenSetEntry.deprecated_at))).one()
            return int(row[0]) + int(row[1])
