"""memory_sources: where an imported bank came from, and its items as the last import saw them.

Written by hand, like 0001. One row per bank (`memupdate data import`); `items` is the source's
state by source key, which makes re-imports idempotent and lets an export leave alone an item
that changed at the source since.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_sources",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("source_namespace", postgresql.JSONB(), server_default="[]", nullable=False),
        sa.Column("items", postgresql.JSONB(), server_default="{}", nullable=False),
        sa.Column("imported_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("exported_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('langgraph', 'items', 'texts')", name="ck_memory_sources_kind"),
        sa.PrimaryKeyConstraint("namespace"),
    )


def downgrade() -> None:
    op.drop_table("memory_sources")
