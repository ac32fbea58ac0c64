"""Capacity runs: each answer of `advisor capacity` (by hand or on advisor.yaml's schedule).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06

Self-contained on purpose: it must keep creating exactly this schema even after tables.py moves on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "capacity_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deployment", sa.String(), nullable=True),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("workload", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("estimate", sa.Float(), nullable=True),
        sa.Column("low", sa.Float(), nullable=True),
        sa.Column("high", sa.Float(), nullable=True),
        sa.Column("level", sa.Float(), nullable=False),
        sa.Column("binding", sa.String(), nullable=True),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("result", JSON_DOC, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_capacity_runs")),
    )
    op.create_index(op.f("ix_capacity_runs_created_at"), "capacity_runs", ["created_at"])
    op.create_index(op.f("ix_capacity_runs_deployment"), "capacity_runs", ["deployment"])


def downgrade() -> None:
    op.drop_index(op.f("ix_capacity_runs_deployment"), table_name="capacity_runs")
    op.drop_index(op.f("ix_capacity_runs_created_at"), table_name="capacity_runs")
    op.drop_table("capacity_runs")
