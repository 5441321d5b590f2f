"""Self-improvement II: pipeline-version lineage and approvals, experiment durations and effects,
golden entries' required doc ids.

Revision ID: 0004_experiments
Revises: 0003_improve
Create Date: 2026-12-01

- `pipeline_versions`: `parent_version_id` (the version a candidate was derived from),
  `created_by`, `promoted_via` (experiment | remediation | admin | regression | startup: *what*
  moved the pointer, beside `promoted_by`, *who*), `approvals` (human checkpoints, a list of
  `{actor, at, note}`).
- `experiments`: `min_duration_s`, `min_effect`, `started_at`, `ended_at`, `created_by`,
  `status_reason` (why it halted or stopped).
- `golden_set_entries`: `required_doc_ids` (the contract's JSONL names documents, not chunks); the
  SQLite deprecate-only trigger is recreated so the new column is frozen too (PostgreSQL's trigger
  compares whole rows already).

Frozen history like 0001: no import of `ragloop.store.models`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004_experiments"
down_revision: str | None = "0003_improve"
branch_labels: str | None = None
depends_on: str | None = None

TS = sa.DateTime(timezone=True)
JSON_ = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
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
)


def _sqlite_golden_trigger(columns: tuple[str, ...]) -> None:
    op.execute("DROP TRIGGER IF EXISTS golden_set_entries_deprecate_only")
    changed = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in columns)
    op.execute(
        "CREATE TRIGGER golden_set_entries_deprecate_only BEFORE UPDATE ON golden_set_entries "
        f"WHEN OLD.deprecated_at IS NOT NULL OR NEW.deprecated_at IS NULL OR {changed} "
        f"BEGIN SELECT RAISE(ABORT, '{GOLDEN_MESSAGE}'); END"
    )


def upgrade() -> None:
    with op.batch_alter_table("pipeline_versions") as t:
        t.add_column(sa.Column("parent_version_id", SHORT, nullable=True))
        t.add_column(sa.Column("created_by", sa.String(length=128), nullable=True))
        t.add_column(sa.Column("promoted_via", sa.String(length=16), nullable=True))
        t.add_column(sa.Column("approvals", JSON_, nullable=False, server_default=EMPTY_LIST))
    with op.batch_alter_table("experiments") as t:
        t.add_column(sa.Column("min_duration_s", sa.Float(), nullable=False, server_default=sa.text("86400")))
        t.add_column(sa.Column("min_effect", sa.Float(), nullable=False, server_default=sa.text("0.02")))
        t.add_column(sa.Column("started_at", TS, nullable=True))
        t.add_column(sa.Column("ended_at", TS, nullable=True))
        t.add_column(sa.Column("created_by", sa.String(length=128), nullable=True))
        t.add_column(sa.Column("status_reason", sa.Text(), nullable=True))
    op.add_column("golden_set_entries", sa.Column("required_doc_ids", JSON_, nullable=False, server_default=EMPTY_LIST))
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_golden_trigger((*_FROZEN, "required_doc_ids"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS golden_set_entries_deprecate_only")
    with op.batch_alter_table("golden_set_entries") as t:
        t.drop_column("required_doc_ids")
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_golden_trigger(_FROZEN)
    with op.batch_alter_table("experiments") as t:
        for c in ("status_reason", "created_by", "ended_at", "started_at", "min_effect", "min_duration_s"):
            t.drop_column(c)
    with op.batch_alter_table("pipeline_versions") as t:
        for c in ("approvals", "promoted_via", "created_by", "parent_version_id"):
            t.drop_column(c)
