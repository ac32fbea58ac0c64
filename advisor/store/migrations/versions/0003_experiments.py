"""Experiments, the schedule's job runs, diagnoses by deployment, and 64-bit experiment ids on load runs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Self-contained on purpose: it must keep creating exactly this schema even after tables.py moves on.

load_runs.experiment_id becomes a BIGINT: earlier advisors stored the experiment's timestamp id as a
14-digit number there, which overflows PostgreSQL's INTEGER. New runs hold experiments.id; the
column keeps no foreign key because rows written before this revision hold those old numbers.
job_runs is what two advisors on one database use to never run the same scheduled job twice: the
(job, slot) pair is unique, so only the first insert of a slot wins.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # SQLite's INTEGER is 64-bit already, and a batch rebuild there would drop load_runs, which
    # with foreign keys on cascades to every request sample.
    if op.get_bind().dialect.name != "sqlite":
        op.alter_column("load_runs", "experiment_id", existing_type=sa.Integer(), type_=sa.BigInteger(),
                        existing_nullable=True)

    # Which watched deployment (advisor.yaml's name) a diagnosis was of, when it was of one.
    with op.batch_alter_table("diagnoses") as batch:
        batch.add_column(sa.Column("deployment", sa.String(), nullable=True))
        # The fleet page's sparkline: one number per diagnosis, without reading its snapshot.
        batch.add_column(sa.Column("ttft_p95", sa.Float(), nullable=True))
        batch.create_index("ix_diagnoses_deployment", ["deployment"])

    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deployment", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("mechanism", sa.String(), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("verdict", sa.String(), nullable=True),
        sa.Column("primary_metric", sa.String(), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("baseline_restored", sa.Boolean(), nullable=True),
        sa.Column("journal", sa.String(), nullable=True),
        # Set by the dashboard that started it, so that it finds this row among others.
        sa.Column("launch_key", sa.String(length=64), nullable=True),
        sa.Column("diagnosis_id", sa.Integer(), nullable=True),
        sa.Column("design", JSON_DOC, nullable=False),
        sa.Column("result", JSON_DOC, nullable=True),
        sa.ForeignKeyConstraint(["diagnosis_id"], ["diagnoses.id"], ondelete="SET NULL",
                                name="fk_experiments_diagnosis_id_diagnoses"),
        sa.PrimaryKeyConstraint("id", name="pk_experiments"),
        # Keys are timestamps: unique per target (one experiment at a time holds its lock).
        sa.UniqueConstraint("deployment", "key", name="uq_experiments_deployment"),
    )
    op.create_index("ix_experiments_created_at", "experiments", ["created_at"])
    op.create_index("ix_experiments_deployment", "experiments", ["deployment"])
    op.create_index("ix_experiments_diagnosis_id", "experiments", ["diagnosis_id"])

    op.create_table(
        "job_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job", sa.String(), nullable=False),
        sa.Column("slot", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ok", sa.Boolean(), nullable=True),
        sa.Column("detail", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_job_runs"),
        sa.UniqueConstraint("job", "slot", name="uq_job_runs_job"),
    )
    op.create_index("ix_job_runs_started_at", "job_runs", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_job_runs_started_at", table_name="job_runs")
    op.drop_table("job_runs")
    op.drop_index("ix_experiments_diagnosis_id", table_name="experiments")
    op.drop_index("ix_experiments_deployment", table_name="experiments")
    op.drop_index("ix_experiments_created_at", table_name="experiments")
    op.drop_table("experiments")
    op.drop_index("ix_diagnoses_deployment", table_name="diagnoses")
    # SQLite drops a column by rebuilding the table, which with foreign keys on would cascade to
    # every finding: there the two columns stay (nothing older reads them).
    if op.get_bind().dialect.name != "sqlite":
        op.drop_column("diagnoses", "ttft_p95")
        op.drop_column("diagnoses", "deployment")
    if op.get_bind().dialect.name != "sqlite":
        op.alter_column("load_runs", "experiment_id", existing_type=sa.BigInteger(), type_=sa.Integer(),
                        existing_nullable=True)
