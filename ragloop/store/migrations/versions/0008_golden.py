"""The golden set's version history and review queue.

Revision ID: 0008_golden
Revises: 0007_model_calls_log
Create Date: 2026-12-02

- `golden_set_versions`: one row per change of the golden set; `version` is the set's version number.
- `golden_set_entries.added_in` / `deprecated_in`: the version that inserted / retired each row, so
  the set at any version is one query. Rows written before this migration are stamped from their
  timestamps (events at the same instant, a revision's insert and deprecation, are one version) and
  each reconstructed change is a `backfill` row in `golden_set_versions`.
- `golden_candidates`: the review queue of machine-proposed entries.
- The deprecate-only triggers are recreated: `added_in` is frozen like every other column, and
  `deprecated_in` may be set together with `deprecated_at` (PostgreSQL compares whole rows minus
  the deprecation columns, so `deprecated_in` joins that list).

Frozen history like 0001: no import of `ragloop.store.models`. Columns are added with plain
`ADD COLUMN` (never a batch table copy, which would drop SQLite's triggers).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008_golden"
down_revision: str | None = "0007_model_calls_log"
branch_labels: str | None = None
depends_on: str | None = None

TS = sa.DateTime(timezone=True)
JSON_ = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
ID = sa.String(length=32)
SHORT = sa.String(length=64)
EMPTY_LIST = sa.text("'[]'")

GOLDEN_MESSAGE = "golden_set_entries are versioned: insert a new version; the only update is deprecating a live row"
_FROZEN = (
    "entry_id",
    "lineage_id",
    "version",
    "question",
    "expected_answer",
    "required_chunk_ids",
    "source",
    "difficulty",
    "domain_tags",
    "held_out",
    "created_by",
    "approved_at",
    "created_at",
    "required_doc_ids",
)
CHANGES = ("add", "import", "revise", "deprecate", "approve", "backfill")
CANDIDATE_STATUSES = ("pending", "approved", "rejected")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _sqlite_trigger(columns: tuple[str, ...]) -> None:
    op.execute("DROP TRIGGER IF EXISTS golden_set_entries_deprecate_only")
    changed = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in columns)
    op.execute(
        "CREATE TRIGGER golden_set_entries_deprecate_only BEFORE UPDATE ON golden_set_entries "
        f"WHEN OLD.deprecated_at IS NOT NULL OR NEW.deprecated_at IS NULL OR {changed} "
        f"BEGIN SELECT RAISE(ABORT, '{GOLDEN_MESSAGE}'); END"
    )


def _pg_function(extra_mutable: tuple[str, ...]) -> None:
    minus = "".join(f" - '{c}'" for c in ("deprecated_at", "superseded_by", *extra_mutable))
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION ragloop_golden_deprecate_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP <> 'UPDATE'
               OR OLD.deprecated_at IS NOT NULL
               OR NEW.deprecated_at IS NULL
               OR (to_jsonb(NEW){minus}) IS DISTINCT FROM (to_jsonb(OLD){minus})
            THEN
                RAISE EXCEPTION '{GOLDEN_MESSAGE} (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END $$
        """
    )


def upgrade() -> None:
    op.create_table(
        "golden_set_versions",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("added", JSON_, nullable=False),
        sa.Column("deprecated", JSON_, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.CheckConstraint(_in("kind", CHANGES), name=op.f("ck_golden_set_versions_kind")),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_golden_set_versions")),
    )
    op.create_table(
        "golden_candidates",
        sa.Column("candidate_id", ID, nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("question_key", SHORT, nullable=False),
        sa.Column("proposed_answer", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("generator", sa.String(length=64), nullable=True),
        sa.Column("answer_id", ID, nullable=True),
        sa.Column("required_doc_ids", JSON_, nullable=False),
        sa.Column("required_chunk_ids", JSON_, nullable=False),
        sa.Column("difficulty", sa.String(length=32), nullable=False),
        sa.Column("domain_tags", JSON_, nullable=False),
        sa.Column("evidence", JSON_, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reviewed_by", sa.String(length=128), nullable=True),
        sa.Column("reviewed_at", TS, nullable=True),
        sa.Column("review_note", sa.Text(), nullable=True),
        sa.Column("answer_edited", sa.Boolean(), nullable=True),
        sa.Column("entry_id", ID, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.CheckConstraint(_in("status", CANDIDATE_STATUSES), name=op.f("ck_golden_candidates_status")),
        sa.ForeignKeyConstraint(
            ["entry_id"],
            ["golden_set_entries.entry_id"],
            name=op.f("fk_golden_candidates_entry_id_golden_set_entries"),
        ),
        sa.PrimaryKeyConstraint("candidate_id", name=op.f("pk_golden_candidates")),
        sa.UniqueConstraint("question_key", name=op.f("uq_golden_candidates_question_key")),
    )
    op.create_index("ix_golden_candidates_status", "golden_candidates", ["status", "created_at"], unique=False)

    op.add_column("golden_set_entries", sa.Column("added_in", sa.Integer(), nullable=True))
    op.add_column("golden_set_entries", sa.Column("deprecated_in", sa.Integer(), nullable=True))
    op.create_index(op.f("ix_golden_set_entries_added_in"), "golden_set_entries", ["added_in"], unique=False)

    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute("DROP TRIGGER IF EXISTS golden_set_entries_deprecate_only")
    else:
        op.execute("ALTER TABLE golden_set_entries DISABLE TRIGGER golden_set_entries_deprecate_only")
    _backfill()
    if sqlite:
        _sqlite_trigger((*_FROZEN, "added_in"))
    else:
        _pg_function(("deprecated_in",))
        op.execute("ALTER TABLE golden_set_entries ENABLE TRIGGER golden_set_entries_deprecate_only")


def _backfill() -> None:
    """Stamp existing rows: one version per distinct instant at which rows were added or deprecated."""
    bind = op.get_bind()
    rows = bind.execute(sa.text("SELECT entry_id, created_at, deprecated_at, created_by FROM golden_set_entries")).all()
    if not rows:
        return
    events: dict[Any, dict[str, list[str]]] = defaultdict(lambda: {"added": [], "deprecated": [], "actors": []})
    for entry_id, created_at, deprecated_at, created_by in rows:
        events[_key(created_at)]["added"].append(entry_id)
        events[_key(created_at)]["actors"].append(created_by)
        if deprecated_at is not None:
            events[_key(deprecated_at)]["deprecated"].append(entry_id)
    versions = sa.table(
        "golden_set_versions",
        sa.column("version", sa.Integer()),
        sa.column("kind", sa.String()),
        sa.column("actor", sa.String()),
        sa.column("note", sa.Text()),
        sa.column("added", JSON_),
        sa.column("deprecated", JSON_),
        sa.column("created_at", TS),
    )
    naive = bind.dialect.name == "sqlite"  # stored as UTC wall time there (the models' UTCDateTime)
    for n, when in enumerate(sorted(events), 1):
        ev = events[when]
        actors = sorted(set(ev["actors"]))
        bind.execute(
            versions.insert().values(
                version=n,
                kind="backfill",
                actor=actors[0] if len(actors) == 1 else "migration",
                note="reconstructed from timestamps by migration 0008",
                added=sorted(ev["added"]),
                deprecated=sorted(ev["deprecated"]),
                created_at=when.replace(tzinfo=None) if naive else when,
            )
        )
        for eid in ev["added"]:
            bind.execute(sa.text("UPDATE golden_set_entries SET added_in = :n WHERE entry_id = :e"), {"n": n, "e": eid})
        for eid in ev["deprecated"]:
            bind.execute(
                sa.text("UPDATE golden_set_entries SET deprecated_in = :n WHERE entry_id = :e"), {"n": n, "e": eid}
            )


def _key(when: Any) -> datetime:
    """SQLite returns the stored text; PostgreSQL a datetime. Both sort correctly as datetimes."""
    from datetime import UTC

    if isinstance(when, str):
        when = datetime.fromisoformat(when)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute("DROP TRIGGER IF EXISTS golden_set_entries_deprecate_only")
    op.drop_index(op.f("ix_golden_set_entries_added_in"), table_name="golden_set_entries")
    if sqlite:  # native DROP COLUMN (SQLite >= 3.35): no table copy, so the no-delete trigger survives
        op.execute("ALTER TABLE golden_set_entries DROP COLUMN deprecated_in")
        op.execute("ALTER TABLE golden_set_entries DROP COLUMN added_in")
        _sqlite_trigger(_FROZEN)
    else:
        op.drop_column("golden_set_entries", "deprecated_in")
        op.drop_column("golden_set_entries", "added_in")
        _pg_function(())
    op.drop_index("ix_golden_candidates_status", table_name="golden_candidates")
    op.drop_table("golden_candidates")
    op.drop_table("golden_set_versions")
