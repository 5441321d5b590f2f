"""Document jobs: uploads and deletions the service runs in the background, kept in the database so
a restart neither forgets finished jobs nor silently drops unfinished ones.

Revision ID: 0002_document_jobs
Revises: 0001_initial
Create Date: 2025-02-01

Frozen history like 0001: no import of `ragloop.store.models`. A new table only, so nothing here
touches the triggers of 0001.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_document_jobs"
down_revision: str | None = "0001_initial"
branch_labels: str | None = None
depends_on: str | None = None

TS = sa.DateTime(timezone=True)
JSON_ = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
JSON_OR_NULL = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)


def upgrade() -> None:
    op.create_table(
        "document_jobs",
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("collection", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("files", JSON_, nullable=False),
        sa.Column("progress", JSON_, nullable=False),
        sa.Column("result", JSON_OR_NULL, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.CheckConstraint("kind IN ('ingest', 'delete')", name=op.f("ck_document_jobs_kind")),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed')", name=op.f("ck_document_jobs_status")
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_document_jobs")),
    )
    op.create_index(op.f("ix_document_jobs_created_at"), "document_jobs", ["created_at"], unique=False)
    op.create_index("ix_document_jobs_owner_status", "document_jobs", ["owner", "status"], unique=False)
    op.create_index("ix_document_jobs_collection", "document_jobs", ["collection", "created_at"], unique=False)


def downgrade() -> None:
    op.drop_table("document_jobs")
