"""A tier-2 score from a judge that has not qualified is kept, but as `unqualified`, never `completed`.

Revision ID: 0009_unqualified_judge
Revises: 0008_golden
Create Date: 2026-12-02

`evaluations.status` gains `unqualified`: the worker scored the answer with a judge other than
the accepted one (`ragloop.experiments.drift.judge_standing`). Every consumer of tier-2 scores
(experiment aggregation, diagnosis candidates, tier-1 recalibration labels, golden nomination,
the rubric check) reads `completed` rows only, so such a score is visible and auditable but
drives no decision. The CHECK constraint is replaced (a table copy on SQLite: `evaluations` has
no triggers to lose). Downgrade turns the `unqualified` rows into `failed` ones with the reason.

Frozen history like 0001: no import of `ragloop.store.models`.
"""

from __future__ import annotations

from alembic import op

revision = "0009_unqualified_judge"
down_revision: str | None = "0008_golden"
branch_labels: str | None = None
depends_on: str | None = None

NEW = "status IN ('completed', 'failed', 'unqualified')"
OLD = "status IN ('completed', 'failed')"


def _replace(check: str) -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_constraint(op.f("ck_evaluations_status"), type_="check")
        batch.create_check_constraint(op.f("ck_evaluations_status"), check)


def upgrade() -> None:
    _replace(NEW)


def downgrade() -> None:
    op.execute(
        "UPDATE evaluations SET status = 'failed', "
        "error = 'unqualified judge (downgraded by migration 0009)' WHERE status = 'unqualified'"
    )
    _replace(OLD)
