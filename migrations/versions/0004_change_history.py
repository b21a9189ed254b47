"""memory_changes and superseded_memories: applied changes of a bank, and the rows they replaced.

Written by hand, like 0001 (the vector column's size comes from MEMUPDATE_EMBEDDING_DIMS, as there).
A compaction proposes a change (`memory_changes`, status `proposed`); applying it promotes its fork
onto the bank in one transaction and keeps every replaced row whole in `superseded_memories` (its id,
seq, timestamps and embedding, with the new keys that replaced it and why), so `memupdate undo`
restores the bank exactly.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects import postgresql

from memupdate.settings import get_settings

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_changes",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("fork", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), server_default="proposed", nullable=False),
        sa.Column("policy", sa.Text(), nullable=True),
        sa.Column("summary", postgresql.JSONB(), server_default="{}", nullable=False),
        sa.Column("details", postgresql.JSONB(), server_default="{}", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("undone_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('proposed', 'applied', 'undone', 'discarded')", name="ck_memory_changes_status"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_memory_changes_namespace", "memory_changes", ["namespace", "id"])
    op.create_table(
        "superseded_memories",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("change_id", sa.BigInteger(), nullable=False),
        sa.Column("memory_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("metadata", postgresql.JSONB(), nullable=False),
        sa.Column("embedding", Vector(get_settings().embedding_dims), nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("superseded_by", postgresql.JSONB(), server_default="[]", nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("superseded_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["change_id"], ["memory_changes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_superseded_memories_namespace_key", "superseded_memories", ["namespace", "key"])
    op.create_index("ix_superseded_memories_change_id", "superseded_memories", ["change_id"])


def downgrade() -> None:
    op.drop_index("ix_superseded_memories_change_id", table_name="superseded_memories")
    op.drop_index("ix_superseded_memories_namespace_key", table_name="superseded_memories")
    op.drop_table("superseded_memories")
    op.drop_index("ix_memory_changes_namespace", table_name="memory_changes")
    op.drop_table("memory_changes")
