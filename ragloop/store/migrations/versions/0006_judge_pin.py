"""Evaluator drift: every tier-2 score carries the judge's pinned version and prompt hash.

Revision ID: 0006_judge_pin
Revises: 0005_one_running_experiment
Create Date: 2026-12-02

- `evaluations.evaluator_version`: the judge's version (`ragloop.improve.judge.JUDGE_VERSION` and
  the judge kind), beside `evaluator_model` (its model);
- `evaluations.evaluator_prompt_sha`: sha256 of the exact prompt (or the scoring formulas' spec)
  the judge used, so a changed prompt is a different judge even under the same model name.
Both nullable: tier-1 and human evaluations, and tier-2 rows written before this revision, have none.

Frozen history like 0001: no import of `ragloop.store.models`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_judge_pin"
down_revision: str | None = "0005_one_running_experiment"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("evaluator_version", sa.String(64), nullable=True))
        batch.add_column(sa.Column("evaluator_prompt_sha", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("evaluator_prompt_sha")
        batch.drop_column("evaluator_version")
