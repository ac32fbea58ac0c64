"""Diagnoses and their findings.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Self-contained on purpose: it must keep creating exactly this schema even after tables.py moves on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "diagnoses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("via", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("window_s", sa.Float(), nullable=False),
        sa.Column("engine_kind", sa.String(), nullable=True),
        sa.Column("engine_version", sa.String(), nullable=True),
        sa.Column("healthy", sa.Boolean(), nullable=False),
        sa.Column("top_severity", sa.String(), nullable=False),
        sa.Column("findings_count", sa.Integer(), nullable=False),
        sa.Column("queries", sa.Integer(), nullable=False),
        sa.Column("diagnosis", JSON_DOC, nullable=False),
        sa.Column("snapshot", JSON_DOC, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_diagnoses"),
    )
    op.create_index("ix_diagnoses_created_at", "diagnoses", ["created_at"])
    op.create_index("ix_diagnoses_target", "diagnoses", ["target"])

    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("diagnosis_id", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.String(), nullable=False),
        sa.Column("severity", sa.String(), nullable=False),
        sa.Column("symptom", sa.String(), nullable=False),
        sa.Column("top_check_mechanism", sa.String(), nullable=True),
        sa.Column("data", JSON_DOC, nullable=False),
        sa.ForeignKeyConstraint(
            ["diagnosis_id"], ["diagnoses.id"], name="fk_findings_diagnosis_id_diagnoses", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_findings"),
    )
    op.create_index("ix_findings_diagnosis_id", "findings", ["diagnosis_id"])
    op.create_index("ix_findings_rule_id", "findings", ["rule_id"])


def downgrade() -> None:
    op.drop_table("findings")
    op.drop_table("diagnoses")
