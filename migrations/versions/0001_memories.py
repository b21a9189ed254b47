"""memories and memory_events, with the vector extension.

Written by hand: autogenerate cannot see the extension. The vector column's size comes from
MEMUPDATE_EMBEDDING_DIMS (384, all-MiniLM-L6-v2) at upgrade time, as the model reads it.

No HNSW index: the reward compares exact top-k retrieval on the base and on a fork, and an
approximate index could rank two identical namespaces differently; namespaces hold a few hundred
to a few thousand memories, where the exact scan over the namespace index is fast (bench/store.py).

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects import postgresql

from memupdate.settings import get_settings

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.create_table(
        "memories",
        sa.Column("id", postgresql.UUID(as_uuid=True), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), server_default="semantic", nullable=False),
        sa.Column("metadata", postgresql.JSONB(), server_default="{}", nullable=False),
        sa.Column("embedding", Vector(get_settings().embedding_dims), nullable=True),
        sa.Column("seq", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("kind IN ('episodic', 'semantic', 'procedural')", name="ck_memories_kind"),
        sa.CheckConstraint("char_length(content) BETWEEN 1 AND 4000", name="ck_memories_content"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("namespace", "key", name="uq_memories_namespace_key"),
    )
    op.create_index(
        "ix_memories_namespace", "memories", ["namespace"], postgresql_ops={"namespace": "text_pattern_ops"}
    )
    op.create_table(
        "memory_events",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("memory_key", sa.String(length=128), nullable=True),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("before", postgresql.JSONB(), nullable=True),
        sa.Column("after", postgresql.JSONB(), nullable=True),
        sa.Column("episode", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_memory_events_namespace", "memory_events", ["namespace", "id"])


def downgrade() -> None:
    op.drop_index("ix_memory_events_namespace", table_name="memory_events")
    op.drop_table("memory_events")
    op.drop_index("ix_memories_namespace", table_name="memories")
    op.drop_table("memories")
    # The extension stays: other schemas on the same server may use it.
