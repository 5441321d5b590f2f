"""Failure diagnosis and remediation: `diagnoses` (one per answer, with the replayable input),
`knowledge_gaps` (grouped unanswerable questions) and `improvement_actions` (one row per proposed or
applied remediation, unique per (kind, component, dedupe_key) so an action is applied once).

Revision ID: 0003_improve
Revises: 0002_document_jobs
Create Date: 2026-12-01

Frozen history like 0001: no import of `ragloop.store.models`. New tables only, so nothing here
touches the triggers of 0001.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003_improve"
down_revision: str | None = "0002_document_jobs"
branch_labels: str | None = None
depends_on: str | None = None

TS = sa.DateTime(timezone=True)
JSON_ = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
JSON_OR_NULL = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)
ID = sa.String(length=32)
SHORT = sa.String(length=64)


def upgrade() -> None:
    op.create_table(
        "diagnoses",
        sa.Column("diagnosis_id", ID, nullable=False),
        sa.Column("answer_id", ID, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reasons", JSON_, nullable=False),
        sa.Column("ideal_answer", sa.Text(), nullable=True),
        sa.Column("ideal_source", sa.String(length=32), nullable=True),
        sa.Column("collection", SHORT, nullable=True),
        sa.Column("pipeline_version", SHORT, nullable=True),
        sa.Column("failure_mode", SHORT, nullable=True),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("evidence", JSON_OR_NULL, nullable=True),
        sa.Column("actions", JSON_, nullable=False),
        sa.Column("rule", sa.String(length=255), nullable=True),
        sa.Column("diagnosis_input", JSON_OR_NULL, nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("diagnosed_at", TS, nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'retrying', 'completed', 'failed', 'skipped')", name=op.f("ck_diagnoses_status")
        ),
        sa.ForeignKeyConstraint(
            ["answer_id"], ["answers.answer_id"], name=op.f("fk_diagnoses_answer_id_answers"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("diagnosis_id", name=op.f("pk_diagnoses")),
        sa.UniqueConstraint("answer_id", name=op.f("uq_diagnoses_answer_id")),
    )
    op.create_index("ix_diagnoses_status", "diagnoses", ["status", "updated_at"], unique=False)
    op.create_index("ix_diagnoses_mode", "diagnoses", ["failure_mode", "diagnosed_at"], unique=False)

    op.create_table(
        "knowledge_gaps",
        sa.Column("gap_id", ID, nullable=False),
        sa.Column("collection", SHORT, nullable=False),
        sa.Column("representative_question", sa.Text(), nullable=False),
        sa.Column("vector", JSON_OR_NULL, nullable=True),
        sa.Column("embedder", sa.String(length=200), nullable=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("questions", JSON_, nullable=False),
        sa.Column("answer_ids", JSON_, nullable=False),
        sa.Column("ideal_answers", JSON_, nullable=False),
        sa.Column("generated_questions", JSON_, nullable=False),
        sa.Column("generated_by", sa.String(length=200), nullable=True),
        sa.Column("best_chunk_id", SHORT, nullable=True),
        sa.Column("best_score", sa.Float(), nullable=True),
        sa.Column("evidence", JSON_, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("first_seen_at", TS, nullable=False),
        sa.Column("last_seen_at", TS, nullable=False),
        sa.CheckConstraint("status IN ('open', 'addressed', 'dismissed')", name=op.f("ck_knowledge_gaps_status")),
        sa.PrimaryKeyConstraint("gap_id", name=op.f("pk_knowledge_gaps")),
    )
    op.create_index(
        "ix_knowledge_gaps_collection", "knowledge_gaps", ["collection", "status", "last_seen_at"], unique=False
    )

    op.create_table(
        "improvement_actions",
        sa.Column("action_id", ID, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("component", sa.String(length=255), nullable=False),
        sa.Column("dedupe_key", sa.String(length=255), nullable=False),
        sa.Column("domain", SHORT, nullable=True),
        sa.Column("answer_ids", JSON_, nullable=False),
        sa.Column("evidence", JSON_, nullable=False),
        sa.Column("expected_delta", JSON_OR_NULL, nullable=True),
        sa.Column("actual_delta", JSON_OR_NULL, nullable=True),
        sa.Column("payload", JSON_, nullable=False),
        sa.Column("revert_payload", JSON_OR_NULL, nullable=True),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("claimed_by", sa.String(length=128), nullable=True),
        sa.Column("lease_expires_at", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("applied_at", TS, nullable=True),
        sa.Column("audit_due_at", TS, nullable=True),
        sa.Column("audited_at", TS, nullable=True),
        sa.Column("reverted_at", TS, nullable=True),
        sa.CheckConstraint(
            "status IN ('proposed', 'scheduled', 'applied', 'kept', 'reverted', 'failed', 'rejected')",
            name=op.f("ck_improvement_actions_status"),
        ),
        sa.PrimaryKeyConstraint("action_id", name=op.f("pk_improvement_actions")),
        sa.UniqueConstraint(
            "kind", "component", "dedupe_key", name=op.f("uq_improvement_actions_kind_component_dedupe_key")
        ),
    )
    op.create_index("ix_improvement_actions_due", "improvement_actions", ["status", "priority"], unique=False)
    op.create_index(
        "ix_improvement_actions_domain", "improvement_actions", ["domain", "status", "applied_at"], unique=False
    )
    op.create_index("ix_improvement_actions_audit", "improvement_actions", ["status", "audit_due_at"], unique=False)


def downgrade() -> None:
    op.drop_table("improvement_actions")
    op.drop_table("knowledge_gaps")
    op.drop_table("diagnoses")
