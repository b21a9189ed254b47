"""The bank's tables: where an imported bank came from (`memory_sources`), its change sets
(`memory_changes`), the rows an applied change replaced (`superseded_memories`) and what watchers
claim while they work on it (`watch_claims`).

    from memupdate.bank.models import MemoryChange, SupersededMemory, MemorySource
    changes = MemoryChange.__table__      # bank.change_log and bank.review_queue write it

Declared on the store's `Base` (one metadata: `alembic check` and `memupdate.migrations.models` see
every table); only `bank/` reads or writes them. The memories themselves are the store's: a change
moves them through the store's operations (`promote_fork` and `undo_promotion` of `memupdate.store`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, DateTime, ForeignKey, Index, String, Text, func
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from memupdate.bank.source_kinds import SOURCE_KINDS
from memupdate.settings import get_settings
from memupdate.store import Base, Embedding

CHANGE_STATUSES = ("proposed", "applied", "undone", "discarded")


class MemorySource(Base):
    """Where an imported bank came from (`memupdate data import`), and the source as last seen.

    `items` maps each source key to what the last import or export saw of it: `{"key": bank key,
    "updated_at": ISO time at the source, "value_hash": ..., "content_hash": ...}`; the next import
    reads what changed at the source from it, and an export refuses to overwrite an item that moved.
    """

    __tablename__ = "memory_sources"
    __table_args__ = (CheckConstraint(f"kind IN {SOURCE_KINDS}", name="ck_memory_sources_kind"),)

    namespace: Mapped[str] = mapped_column(Text, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    uri: Mapped[str] = mapped_column(Text)  # a URL without its password, or a file path
    source_namespace: Mapped[list[str]] = mapped_column(JSONB, server_default="[]")
    items: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    imported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    exported_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class MemoryChange(Base):
    """A change set of one bank: proposed by a compaction (its fork and review), then applied or undone.

    `details["replaced"]` maps each bank key the change replaces to `{"by": [new keys], "reason": ...}`:
    the superseded rows keep it when the change is applied.
    """

    __tablename__ = "memory_changes"
    __table_args__ = (
        Index("ix_memory_changes_namespace", "namespace", "id"),
        CheckConstraint(f"status IN {CHANGE_STATUSES}", name="ck_memory_changes_status"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(Text)
    fork: Mapped[str | None] = mapped_column(Text, nullable=True)
    status: Mapped[str] = mapped_column(String(16), server_default="proposed")
    policy: Mapped[str | None] = mapped_column(Text, nullable=True)
    summary: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    details: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    undone_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SupersededMemory(Base):
    """A bank row an applied change replaced, kept whole (id, seq, timestamps, embedding) with what
    replaced it, why and when: superseded, not deleted; `memupdate undo` puts it back exactly."""

    __tablename__ = "superseded_memories"
    __table_args__ = (
        Index("ix_superseded_memories_namespace_key", "namespace", "key"),
        Index("ix_superseded_memories_change_id", "change_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    change_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("memory_changes.id", ondelete="CASCADE"))
    memory_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    namespace: Mapped[str] = mapped_column(Text)
    key: Mapped[str] = mapped_column(String(128))
    content: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB)
    embedding: Mapped[list[float] | None] = mapped_column(Embedding(get_settings().embedding_dims), nullable=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    superseded_by: Mapped[list[str]] = mapped_column(JSONB, server_default="[]")
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    superseded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class WatchClaim(Base):
    """One row per bank a `memupdate watch` worker claims (its path): the row is locked by the worker's
    open transaction while it works (`bank.claims`); the table holds no state."""

    __tablename__ = "watch_claims"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
