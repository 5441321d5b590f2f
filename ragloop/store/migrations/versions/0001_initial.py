"""The initial schema: the twelve tables of the self-improving service, plus the triggers that make
`improvement_audit_log` insert-only and `golden_set_entries` insert + deprecate only.

Revision ID: 0001_initial
Revises:
Create Date: 2025-01-01

Migrations are frozen history: they never import `ragloop.store.models` (which keeps changing).
Note for later migrations on SQLite: `batch_alter_table` recreates a table, and a recreated table
loses its triggers; re-run the trigger DDL below for that table afterwards.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001_initial"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

TS = sa.DateTime(timezone=True)
JSON_ = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
JSON_OR_NULL = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("rate_limit_per_minute", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
        sa.Column("last_used_at", TS, nullable=True),
        sa.CheckConstraint("role IN ('user', 'admin')", name=op.f("ck_api_keys_role")),
        sa.PrimaryKeyConstraint("key_id", name=op.f("pk_api_keys")),
    )
    op.create_table(
        "experiments",
        sa.Column("experiment_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("control_config", JSON_, nullable=False),
        sa.Column("treatment_config", JSON_, nullable=False),
        sa.Column("control_version", sa.String(length=64), nullable=True),
        sa.Column("treatment_version", sa.String(length=64), nullable=True),
        sa.Column("traffic_split", sa.Float(), nullable=False),
        sa.Column("min_sample_size", sa.Integer(), nullable=False),
        sa.Column("primary_metric", sa.String(length=64), nullable=False),
        sa.Column("guardrail_metrics", JSON_, nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("control_sample", sa.Integer(), nullable=False),
        sa.Column("treatment_sample", sa.Integer(), nullable=False),
        sa.Column("recommendation", sa.String(length=32), nullable=True),
        sa.Column("results", JSON_, nullable=False),
        sa.Column("auto_promote_at", TS, nullable=True),
        sa.Column("promoted_at", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("experiment_id", name=op.f("pk_experiments")),
    )
    op.create_index(op.f("ix_experiments_status"), "experiments", ["status"], unique=False)
    op.create_table(
        "golden_set_entries",
        sa.Column("entry_id", sa.String(length=32), nullable=False),
        sa.Column("lineage_id", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("expected_answer", sa.Text(), nullable=False),
        sa.Column("required_chunk_ids", JSON_, nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("difficulty", sa.String(length=32), nullable=False),
        sa.Column("domain_tags", JSON_, nullable=False),
        sa.Column("held_out", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("approved_at", TS, nullable=True),
        sa.Column("deprecated_at", TS, nullable=True),
        sa.Column("superseded_by", sa.String(length=32), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["superseded_by"],
            ["golden_set_entries.entry_id"],
            name=op.f("fk_golden_set_entries_superseded_by_golden_set_entries"),
        ),
        sa.PrimaryKeyConstraint("entry_id", name=op.f("pk_golden_set_entries")),
        sa.UniqueConstraint("lineage_id", "version", name=op.f("uq_golden_set_entries_lineage_id_version")),
    )
    op.create_index(op.f("ix_golden_set_entries_lineage_id"), "golden_set_entries", ["lineage_id"], unique=False)
    op.create_table(
        "improvement_audit_log",
        sa.Column("log_id", sa.String(length=32), nullable=False),
        sa.Column("action_type", sa.String(length=64), nullable=False),
        sa.Column("triggered_by", sa.String(length=200), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("evidence", JSON_, nullable=False),
        sa.Column("pipeline_version_before", sa.String(length=64), nullable=True),
        sa.Column("pipeline_version_after", sa.String(length=64), nullable=True),
        sa.Column("expected_delta", JSON_OR_NULL, nullable=True),
        sa.Column("actual_delta", JSON_OR_NULL, nullable=True),
        sa.Column("refers_to", sa.String(length=32), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["refers_to"],
            ["improvement_audit_log.log_id"],
            name=op.f("fk_improvement_audit_log_refers_to_improvement_audit_log"),
        ),
        sa.PrimaryKeyConstraint("log_id", name=op.f("pk_improvement_audit_log")),
    )
    op.create_index(
        op.f("ix_improvement_audit_log_action_type"), "improvement_audit_log", ["action_type"], unique=False
    )
    op.create_index(op.f("ix_improvement_audit_log_created_at"), "improvement_audit_log", ["created_at"], unique=False)
    op.create_table(
        "pipeline_versions",
        sa.Column("version_id", sa.String(length=64), nullable=False),
        sa.Column("config", JSON_, nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("previous_version_id", sa.String(length=64), nullable=True),
        sa.Column("promoted_by", sa.String(length=128), nullable=True),
        sa.Column("quality_at_promotion", JSON_, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("activated_at", TS, nullable=True),
        sa.Column("retired_at", TS, nullable=True),
        sa.CheckConstraint("status IN ('active', 'candidate', 'retired')", name=op.f("ck_pipeline_versions_status")),
        sa.ForeignKeyConstraint(
            ["previous_version_id"],
            ["pipeline_versions.version_id"],
            name=op.f("fk_pipeline_versions_previous_version_id_pipeline_versions"),
        ),
        sa.PrimaryKeyConstraint("version_id", name=op.f("pk_pipeline_versions")),
    )
    op.create_index(
        "uq_pipeline_versions_one_active",
        "pipeline_versions",
        ["status"],
        unique=True,
        sqlite_where=sa.text("status = 'active'"),
        postgresql_where=sa.text("status = 'active'"),
    )
    op.create_table(
        "regression_runs",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("golden_set_version", sa.Integer(), nullable=False),
        sa.Column("pipeline_version", sa.String(length=64), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("completed_at", TS, nullable=True),
        sa.Column("faithfulness_mean", sa.Float(), nullable=True),
        sa.Column("answer_relevance_mean", sa.Float(), nullable=True),
        sa.Column("context_precision_mean", sa.Float(), nullable=True),
        sa.Column("context_recall_mean", sa.Float(), nullable=True),
        sa.Column("baseline_faithfulness", sa.Float(), nullable=True),
        sa.Column("metrics", JSON_, nullable=False),
        sa.Column("baseline", JSON_, nullable=False),
        sa.Column("regression_detected", sa.Boolean(), nullable=False),
        sa.Column("rollback_triggered", sa.Boolean(), nullable=False),
        sa.Column("run_status", sa.String(length=16), nullable=False),
        sa.Column("report", JSON_, nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_regression_runs")),
    )
    op.create_index(op.f("ix_regression_runs_pipeline_version"), "regression_runs", ["pipeline_version"], unique=False)
    op.create_table(
        "queries",
        sa.Column("query_id", sa.String(length=32), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=True),
        sa.Column("question_text", sa.Text(), nullable=False),
        sa.Column("question_hash", sa.String(length=64), nullable=False),
        sa.Column("answer_id", sa.String(length=32), nullable=True),
        sa.Column("experiment_id", sa.String(length=32), nullable=True),
        sa.Column("variant", sa.String(length=16), nullable=True),
        sa.Column("pipeline_version", sa.String(length=64), nullable=False),
        sa.Column("retrieved_chunk_ids", JSON_, nullable=False),
        sa.Column("retrieval_scores", JSON_, nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.experiment_id"],
            name=op.f("fk_queries_experiment_id_experiments"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("query_id", name=op.f("pk_queries")),
    )
    op.create_index(op.f("ix_queries_created_at"), "queries", ["created_at"], unique=False)
    op.create_index("ix_queries_experiment", "queries", ["experiment_id", "variant", "created_at"], unique=False)
    op.create_index(op.f("ix_queries_question_hash"), "queries", ["question_hash"], unique=False)
    op.create_index(op.f("ix_queries_session_id"), "queries", ["session_id"], unique=False)
    op.create_table(
        "answers",
        sa.Column("answer_id", sa.String(length=32), nullable=False),
        sa.Column("query_id", sa.String(length=32), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("answer_text", sa.Text(), nullable=False),
        sa.Column("answer_hash", sa.String(length=64), nullable=False),
        sa.Column("citations", JSON_, nullable=False),
        sa.Column("citation_count", sa.Integer(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("refused", sa.Boolean(), nullable=False),
        sa.Column("termination_reason", sa.String(length=64), nullable=True),
        sa.Column("residual_deficiencies", JSON_, nullable=False),
        sa.Column("trace", JSON_, nullable=False),
        sa.Column("pipeline_version", sa.String(length=64), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["query_id"], ["queries.query_id"], name=op.f("fk_answers_query_id_queries"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("answer_id", name=op.f("pk_answers")),
    )
    op.create_index(op.f("ix_answers_query_id"), "answers", ["query_id"], unique=False)
    op.create_index(op.f("ix_answers_session_id"), "answers", ["session_id"], unique=False)
    op.create_table(
        "evaluation_jobs",
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("answer_id", sa.String(length=32), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("payload", JSON_, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("available_at", TS, nullable=False),
        sa.Column("leased_by", sa.String(length=128), nullable=True),
        sa.Column("lease_token", sa.String(length=32), nullable=True),
        sa.Column("lease_expires_at", TS, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("dead_reason", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("completed_at", TS, nullable=True),
        sa.CheckConstraint("status IN ('queued', 'leased', 'done', 'dead')", name=op.f("ck_evaluation_jobs_status")),
        sa.ForeignKeyConstraint(
            ["answer_id"], ["answers.answer_id"], name=op.f("fk_evaluation_jobs_answer_id_answers"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_evaluation_jobs")),
        sa.UniqueConstraint("answer_id", "tier", name=op.f("uq_evaluation_jobs_answer_id_tier")),
    )
    op.create_index("ix_evaluation_jobs_due", "evaluation_jobs", ["status", "available_at"], unique=False)
    op.create_index("ix_evaluation_jobs_lease", "evaluation_jobs", ["status", "lease_expires_at"], unique=False)
    op.create_table(
        "evaluations",
        sa.Column("eval_id", sa.String(length=32), nullable=False),
        sa.Column("answer_id", sa.String(length=32), nullable=False),
        sa.Column("evaluation_tier", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("faithfulness", sa.Float(), nullable=True),
        sa.Column("answer_relevance", sa.Float(), nullable=True),
        sa.Column("context_precision", sa.Float(), nullable=True),
        sa.Column("context_recall", sa.Float(), nullable=True),
        sa.Column("heuristic_score", sa.Float(), nullable=True),
        sa.Column("scores", JSON_, nullable=False),
        sa.Column("failure_mode", sa.String(length=64), nullable=True),
        sa.Column("failure_evidence", JSON_, nullable=False),
        sa.Column("oracle_chunk_ids", JSON_, nullable=False),
        sa.Column("improvement_actions", JSON_, nullable=False),
        sa.Column("evaluator_model", sa.String(length=128), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("evaluated_at", TS, nullable=False),
        sa.CheckConstraint("evaluation_tier IN ('heuristic', 'llm_judge', 'human')", name=op.f("ck_evaluations_tier")),
        sa.CheckConstraint("status IN ('completed', 'failed')", name=op.f("ck_evaluations_status")),
        sa.ForeignKeyConstraint(
            ["answer_id"], ["answers.answer_id"], name=op.f("fk_evaluations_answer_id_answers"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("eval_id", name=op.f("pk_evaluations")),
    )
    op.create_index(op.f("ix_evaluations_answer_id"), "evaluations", ["answer_id"], unique=False)
    op.create_index("ix_evaluations_failure", "evaluations", ["failure_mode", "evaluated_at"], unique=False)
    op.create_index("ix_evaluations_tier_score", "evaluations", ["evaluation_tier", "heuristic_score"], unique=False)
    op.create_table(
        "model_calls",
        sa.Column("call_id", sa.String(length=32), nullable=False),
        sa.Column("answer_id", sa.String(length=32), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("purpose", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("prompt", JSON_, nullable=False),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["answer_id"], ["answers.answer_id"], name=op.f("fk_model_calls_answer_id_answers"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("call_id", name=op.f("pk_model_calls")),
    )
    op.create_index(op.f("ix_model_calls_answer_id"), "model_calls", ["answer_id"], unique=False)
    op.create_index(op.f("ix_model_calls_created_at"), "model_calls", ["created_at"], unique=False)
    op.create_index(op.f("ix_model_calls_run_id"), "model_calls", ["run_id"], unique=False)
    op.create_table(
        "user_feedback",
        sa.Column("feedback_id", sa.String(length=32), nullable=False),
        sa.Column("answer_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=True),
        sa.Column("rating", sa.String(length=16), nullable=False),
        sa.Column("issues", JSON_, nullable=False),
        sa.Column("corrected_answer", sa.Text(), nullable=True),
        sa.Column("relevant_doc_ids", JSON_, nullable=False),
        sa.Column("highlighted_passages", JSON_, nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.CheckConstraint("rating IN ('positive', 'negative')", name=op.f("ck_user_feedback_rating")),
        sa.ForeignKeyConstraint(
            ["answer_id"], ["answers.answer_id"], name=op.f("fk_user_feedback_answer_id_answers"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("feedback_id", name=op.f("pk_user_feedback")),
    )
    op.create_index(op.f("ix_user_feedback_answer_id"), "user_feedback", ["answer_id"], unique=False)
    _create_triggers()


def downgrade() -> None:
    _drop_triggers()
    for table in (
        "user_feedback",
        "model_calls",
        "evaluations",
        "evaluation_jobs",
        "answers",
        "queries",
        "regression_runs",
        "pipeline_versions",
        "improvement_audit_log",
        "golden_set_entries",
        "experiments",
        "api_keys",
    ):
        op.drop_table(table)


AUDIT_MESSAGE = "improvement_audit_log is insert-only"
GOLDEN_MESSAGE = "golden_set_entries are versioned: insert a new version; the only update is deprecating a live row"
# every golden_set_entries column a deprecation must leave alone (all but deprecated_at, superseded_by)
GOLDEN_FROZEN_COLUMNS = (
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


def _create_triggers() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER improvement_audit_log_no_{event.lower()} BEFORE {event} ON improvement_audit_log "
                f"BEGIN SELECT RAISE(ABORT, '{AUDIT_MESSAGE}'); END"
            )
        changed = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in GOLDEN_FROZEN_COLUMNS)
        op.execute(
            "CREATE TRIGGER golden_set_entries_deprecate_only BEFORE UPDATE ON golden_set_entries "
            f"WHEN OLD.deprecated_at IS NOT NULL OR NEW.deprecated_at IS NULL OR {changed} "
            f"BEGIN SELECT RAISE(ABORT, '{GOLDEN_MESSAGE}'); END"
        )
        op.execute(
            "CREATE TRIGGER golden_set_entries_no_delete BEFORE DELETE ON golden_set_entries "
            f"BEGIN SELECT RAISE(ABORT, '{GOLDEN_MESSAGE}'); END"
        )
        return
    # PostgreSQL: functions live in the schema the tables live in (the first of search_path)
    op.execute(
        """
        CREATE FUNCTION ragloop_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '% is insert-only (% refused)', TG_TABLE_NAME, TG_OP
                USING ERRCODE = 'insufficient_privilege';
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER improvement_audit_log_insert_only BEFORE UPDATE OR DELETE ON improvement_audit_log "
        "FOR EACH ROW EXECUTE FUNCTION ragloop_refuse_change()"
    )
    op.execute(
        "CREATE TRIGGER improvement_audit_log_no_truncate BEFORE TRUNCATE ON improvement_audit_log "
        "FOR EACH STATEMENT EXECUTE FUNCTION ragloop_refuse_change()"
    )
    op.execute(
        f"""
        CREATE FUNCTION ragloop_golden_deprecate_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP <> 'UPDATE'
               OR OLD.deprecated_at IS NOT NULL
               OR NEW.deprecated_at IS NULL
               OR (to_jsonb(NEW) - 'deprecated_at' - 'superseded_by')
                  IS DISTINCT FROM (to_jsonb(OLD) - 'deprecated_at' - 'superseded_by')
            THEN
                RAISE EXCEPTION '{GOLDEN_MESSAGE} (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER golden_set_entries_deprecate_only BEFORE UPDATE OR DELETE ON golden_set_entries "
        "FOR EACH ROW EXECUTE FUNCTION ragloop_golden_deprecate_only()"
    )
    op.execute(
        "CREATE TRIGGER golden_set_entries_no_truncate BEFORE TRUNCATE ON golden_set_entries "
        "FOR EACH STATEMENT EXECUTE FUNCTION ragloop_refuse_change()"
    )


def _drop_triggers() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in (
            "improvement_audit_log_no_update",
            "improvement_audit_log_no_delete",
            "golden_set_entries_deprecate_only",
            "golden_set_entries_no_delete",
        ):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        return
    for name, table in (
        ("improvement_audit_log_insert_only", "improvement_audit_log"),
        ("improvement_audit_log_no_truncate", "improvement_audit_log"),
        ("golden_set_entries_deprecate_only", "golden_set_entries"),
        ("golden_set_entries_no_truncate", "golden_set_entries"),
    ):
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
    op.execute("DROP FUNCTION IF EXISTS ragloop_golden_deprecate_only()")
    op.execute("DROP FUNCTION IF EXISTS ragloop_refuse_change()")
