"""At most one running experiment, enforced by the database.

Revision ID: 0005_one_running_experiment
Revises: 0004_experiments
Create Date: 2026-12-02

`ragloop.experiments.registry` already refuses a second running experiment, but by a read then a
write: two servers (or two workers of the auto-experiment step) could both read "none running" and
both insert. A partial unique index on `experiments.status` where it is 'running' (the pattern of
`uq_pipeline_versions_one_active`) makes the second insert fail. Should a database already hold
several running experiments, all but the newest are stopped first, with the reason recorded.

Frozen history like 0001: no import of `ragloop.store.models`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_one_running_experiment"
down_revision: str | None = "0004_experiments"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.execute(
        "UPDATE experiments SET status = 'stopped', "
        "status_reason = 'stopped by migration 0005: only one experiment may run at a time' "
        "WHERE status = 'running' AND experiment_id NOT IN ("
        "SELECT experiment_id FROM (SELECT experiment_id FROM experiments WHERE status = 'running' "
        "ORDER BY created_at DESC, experiment_id LIMIT 1) AS newest)"
    )
    op.create_index(
        "uq_experiments_one_running",
        "experiments",
        ["status"],
        unique=True,
        sqlite_where=sa.text("status = 'running'"),
        postgresql_where=sa.text("status = 'running'"),
    )


def downgrade() -> None:
    op.drop_index("uq_experiments_one_running", table_name="experiments")
