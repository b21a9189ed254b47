"""llm_replies: the LLM answerer's and judge's replies, cached across evaluation runs.

Written by hand, like 0001. One row per (kind, model, template hash, input hash, question); the
unique constraint is also the lookup index.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "llm_replies",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("template_hash", sa.String(length=64), nullable=False),
        sa.Column("input_hash", sa.String(length=64), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("reply", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("kind IN ('answer', 'judge')", name="ck_llm_replies_kind"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "kind", "model", "template_hash", "input_hash", "question", name="uq_llm_replies_key"
        ),
    )


def downgrade() -> None:
    op.drop_table("llm_replies")
