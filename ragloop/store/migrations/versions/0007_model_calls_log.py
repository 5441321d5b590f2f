"""The call log really written: `model_calls.cached` and `model_calls.step`.

Revision ID: 0007_model_calls_log
Revises: 0006_judge_pin
Create Date: 2026-12-02

`model_calls` becomes the one call log and usage ledger (the model layer's `models.sqlite` log is
gone): `cached` marks a response served from the chat cache (logged, costs nothing), `step` names
the answer-graph node that made the call.

Frozen history like 0001: no import of `ragloop.store.models`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_model_calls_log"
down_revision: str | None = "0006_judge_pin"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("model_calls") as batch:
        batch.add_column(sa.Column("cached", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("step", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_calls") as batch:
        batch.drop_column("step")
        batch.drop_column("cached")
