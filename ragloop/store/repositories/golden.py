"""The versioned golden set. Its own module because it has its own invariant (insert + deprecate,
never update) and its own notion of a version.

Every write is one *change* and takes the next golden-set version number: a row in
`golden_set_versions`, stamped on the rows it inserted (`added_in`) and deprecated (`deprecated_in`).
Writers are serialised (an advisory lock on PostgreSQL, the write lock on SQLite), so numbers never
collide and never skip. The set at version N is `added_in <= N < coalesce(deprecated_in, ∞)`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from ragloop.store.db import Database
from ragloop.store.golden_models import GoldenSetVersion
from ragloop.store.models import GoldenSetEntry, new_id, utcnow
from ragloop.store.repositories._base import NotFoundError, StoreConflictError, _serialize
from ragloop.store.vocabulary import GoldenChange, GoldenDifficulty, GoldenSource

GOLDEN_LOCK = "golden_set_versions"
"""The advisory lock every golden-set writer holds (PostgreSQL; SQLite writers hold the write lock)."""


@dataclass(frozen=True)
class NewEntry:
    """One question to insert (a batch of these is one change: `add_golden_entries`)."""

    question: str
    expected_answer: str
    source: str
    required_chunk_ids: Sequence[str] = ()
    required_doc_ids: Sequence[str] = ()
    difficulty: str = GoldenDifficulty.STANDARD
    domain_tags: Sequence[str] = field(default_factory=tuple)
    held_out: bool = False
    approved_at: datetime | None = None


def _check(source: str, difficulty: str) -> None:
    """The vocabulary, enforced at the one place rows are written (the table has no CHECK on these:
    adding one would copy the table on SQLite and drop its triggers)."""
    if source not in set(GoldenSource):
        raise ValueError(f"unknown golden source {source!r}: one of {', '.join(GoldenSource)}")
    if difficulty not in set(GoldenDifficulty):
        raise ValueError(f"unknown golden difficulty {difficulty!r}: one of {', '.join(GoldenDifficulty)}")


class GoldenSet:
    """Versioned golden questions: insert + deprecate, never update in place (a trigger enforces it).

    Each question has a `lineage_id` (its first version's `entry_id`); a revision inserts version n+1
    and marks version n `deprecated_at` / `superseded_by`. The golden-set version number
    (`golden_set_version()`) counts every insert and every deprecation, so it only grows, and
    `golden_set_as_of(t)` rebuilds the set any regression run saw.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def _begin_change(self, s: Session, kind: GoldenChange, actor: str, note: str | None = None) -> GoldenSetVersion:
        """Take the next version number (inside the caller's write transaction, under the lock)."""
        _serialize(s, GOLDEN_LOCK)
        head = s.scalar(select(func.max(GoldenSetVersion.version))) or 0
        change = GoldenSetVersion(version=head + 1, kind=kind, actor=actor, note=note, added=[], deprecated=[])
        s.add(change)
        s.flush()
        return change

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
        kind: GoldenChange = GoldenChange.ADD,
        note: str | None = None,
    ) -> GoldenSetEntry:
        """A new question (version 1), as one golden-set change. `source` is a `GoldenSource`;
        `approved_at` is the human approval (machine-made entries are only added once approved)."""
        entry = NewEntry(
            question,
            expected_answer,
            source,
            tuple(required_chunk_ids),
            tuple(required_doc_ids),
            difficulty,
            tuple(domain_tags),
            held_out,
            approved_at,
        )
        return self.add_golden_entries([entry], created_by=created_by, kind=kind, note=note)[0]

    def add_golden_entries(
        self,
        entries: Sequence[NewEntry],
        *,
        created_by: str,
        kind: GoldenChange = GoldenChange.IMPORT,
        note: str | None = None,
    ) -> list[GoldenSetEntry]:
        """Insert several questions as one change (one new version); nothing when `entries` is empty."""
        if not entries:
            return []
        for e in entries:
            _check(e.source, e.difficulty)
        with self.db.transaction() as s:
            change = self._begin_change(s, kind, created_by, note)
            rows = []
            for e in entries:
                entry_id = new_id()
                rows.append(
                    GoldenSetEntry(
                        entry_id=entry_id,
                        lineage_id=entry_id,
                        version=1,
                        question=e.question,
                        expected_answer=e.expected_answer,
                        required_chunk_ids=list(e.required_chunk_ids),
                        required_doc_ids=list(e.required_doc_ids),
                        source=str(e.source),
                        difficulty=str(e.difficulty),
                        domain_tags=list(e.domain_tags),
                        held_out=e.held_out,
                        created_by=created_by,
                        approved_at=e.approved_at,
                        added_in=change.version,
                    )
                )
            s.add_all(rows)
            change.added = [r.entry_id for r in rows]
            s.flush()
            return rows

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
        required_doc_ids: Sequence[str] | None = None,
        kind: GoldenChange = GoldenChange.REVISE,
        note: str | None = None,
    ) -> GoldenSetEntry:
        """Insert the next version of `old_id` (fields not given are copied) and deprecate `old_id`,
        in one transaction and one golden-set version. The new version is unapproved unless
        `approved_at` is given: an approval covers the text that was approved. Raises
        StoreConflictError if `old_id` is already deprecated."""
        with self.db.transaction() as s:
            change = self._begin_change(s, kind, created_by, note)
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
                required_doc_ids=list(old.required_doc_ids if required_doc_ids is None else required_doc_ids),
                source=old.source if source is None else source,
                difficulty=old.difficulty if difficulty is None else difficulty,
                domain_tags=list(old.domain_tags if domain_tags is None else domain_tags),
                held_out=old.held_out if held_out is None else held_out,
                created_by=created_by,
                approved_at=approved_at,
                added_in=change.version,
            )
            _check(new.source, new.difficulty)
            s.add(new)
            s.flush()  # the new row must exist before the old one points at it
            old.deprecated_at = new.created_at
            old.superseded_by = new.entry_id
            old.deprecated_in = change.version
            change.added, change.deprecated = [new.entry_id], [old.entry_id]
            s.flush()
            return new

    def deprecate_golden_entry(
        self, entry_id: str, *, actor: str = "unknown", note: str | None = None
    ) -> GoldenSetEntry:
        """Retire a question without a successor (the golden-set form of a delete): one version."""
        with self.db.transaction() as s:
            change = self._begin_change(s, GoldenChange.DEPRECATE, actor, note)
            row = s.scalar(select(GoldenSetEntry).where(GoldenSetEntry.entry_id == entry_id).with_for_update())
            if row is None:
                raise NotFoundError(f"no golden_set_entries row {entry_id!r}")
            if row.deprecated_at is not None:
                raise StoreConflictError(f"golden entry {entry_id} is already deprecated")
            row.deprecated_at = utcnow()
            row.deprecated_in = change.version
            change.deprecated = [entry_id]
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
        """The current golden-set version: the number of the last change (0: never changed). It grows
        with every add, import batch, revision, deprecation and approval."""
        with self.db.transaction(write=False) as s:
            return int(s.scalar(select(func.max(GoldenSetVersion.version))) or 0)

    def golden_set_at_version(self, version: int, *, include_held_out: bool = True) -> list[GoldenSetEntry]:
        """The set as it stood right after change `version` (0: empty). Raises NotFoundError for a
        version that does not exist yet (or a negative one)."""
        head = self.golden_set_version()
        if version < 0 or version > head:
            raise NotFoundError(f"no golden-set version {version} (the current version is {head})")
        stmt = select(GoldenSetEntry).where(
            GoldenSetEntry.added_in <= version,
            or_(GoldenSetEntry.deprecated_in.is_(None), GoldenSetEntry.deprecated_in > version),
        )
        if not include_held_out:
            stmt = stmt.where(GoldenSetEntry.held_out.is_(False))
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt.order_by(GoldenSetEntry.created_at, GoldenSetEntry.entry_id)))

    def versions(self, *, limit: int = 100, offset: int = 0) -> list[GoldenSetVersion]:
        """The change log, newest first."""
        stmt = select(GoldenSetVersion).order_by(GoldenSetVersion.version.desc()).limit(limit).offset(offset)
        with self.db.transaction(write=False) as s:
            return list(s.scalars(stmt))

    def version_info(self, version: int) -> GoldenSetVersion | None:
        with self.db.transaction(write=False) as s:
            return s.get(GoldenSetVersion, version)
