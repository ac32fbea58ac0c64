"""Load runs and their per-request samples.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01

Self-contained on purpose: it must keep creating exactly this schema even after tables.py moves on.
experiment_id, arm and block are for the A/B experiments to come, which store their per-block runs
here; their foreign key to an experiments table arrives with that table's migration.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "load_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("workload_name", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("why_invalid", sa.String(), nullable=True),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("ok", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("workload", JSON_DOC, nullable=False),
        sa.Column("summary", JSON_DOC, nullable=False),
        sa.Column("manifest", JSON_DOC, nullable=True),
        sa.Column("experiment_id", sa.Integer(), nullable=True),
        sa.Column("arm", sa.String(), nullable=True),
        sa.Column("block", sa.Integer(), nullable=True),
        # op.f: the name is final; the store's naming convention would prefix it again.
        sa.CheckConstraint("arm IN ('baseline', 'candidate')", name=op.f("ck_load_runs_arm")),
        sa.PrimaryKeyConstraint("id", name="pk_load_runs"),
    )
    op.create_index("ix_load_runs_created_at", "load_runs", ["created_at"])
    op.create_index("ix_load_runs_target", "load_runs", ["target"])
    op.create_index("ix_load_runs_experiment_id", "load_runs", ["experiment_id"])

    op.create_table(
        "request_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("scheduled_s", sa.Float(), nullable=True),
        sa.Column("sent_s", sa.Float(), nullable=True),
        sa.Column("ttft", sa.Float(), nullable=True),
        sa.Column("tpot", sa.Float(), nullable=True),
        sa.Column("e2e", sa.Float(), nullable=True),
        sa.Column("lag", sa.Float(), nullable=True),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("prefix_group", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["load_runs.id"], name="fk_request_samples_run_id_load_runs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_request_samples"),
    )
    op.create_index("ix_request_samples_run_id", "request_samples", ["run_id"])


def downgrade() -> None:
    op.drop_table("request_samples")
    op.drop_table("load_runs")
