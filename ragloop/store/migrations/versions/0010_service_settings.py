"""Settings an admin changes at run time: `service_settings` (key, JSON value, who, when).

Revision ID: 0010_service_settings
Revises: 0009_unqualified_judge
Create Date: 2026-12-02

The first one is the regression alert webhook (`ragloop.experiments.alerts`), set with
`PUT /v1/regression/webhook` or `ragloop regress webhook set`; the environment variable stays
its default.

Frozen history like 0001: no import of `ragloop.store.models`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010_service_settings"
down_revision: str | None = "0009_unqualified_judge"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "service_settings",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column(
            "value", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_service_settings")),
    )


def downgrade() -> None:
    op.drop_table("service_settings")
