"""The store's schema: `memories` and `memory_events` (SQLAlchemy 2 typed ORM; Alembic owns the DDL).

A memory lives in one namespace, a path such as `locomo/conv-26/traj/conv-26-qa3-1a2b3c4d`.
Its `key` is the id the tools and LangGraph see; a fork copies keys, so a memory keeps its id
in every trajectory forked from the same base and two namespaces can be diffed key by key.

`Base` is the one declarative base: the layers above declare their own tables on it where they
use them (`bank.models`: changes, superseded rows, sources; `scoring.llm_cache`: `llm_replies`),
and `memupdate.migrations.models` loads them all, so Alembic compares one metadata.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal, get_args

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Identity,
    Index,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from memupdate.settings import get_settings
from memupdate.store.codecs import Embedding

# One definition of the kinds: the tool schema types with MemoryKind, the CHECK constraint lists MEMORY_KINDS.
MemoryKind = Literal["episodic", "semantic", "procedural"]
MEMORY_KINDS: tuple[str, ...] = get_args(MemoryKind)
# Documented limit on one memory's text: LoCoMo facts are ~100 characters; 4,000 leaves room for merges.
MAX_CONTENT_CHARS = 4000


class Base(DeclarativeBase):
    pass


class Memory(Base):
    __tablename__ = "memories"
    __table_args__ = (
        UniqueConstraint("namespace", "key", name="uq_memories_namespace_key"),
        # text_pattern_ops serves both `namespace = :ns` and prefix `LIKE 'a/b/%'` scans.
        Index("ix_memories_namespace", "namespace", postgresql_ops={"namespace": "text_pattern_ops"}),
        CheckConstraint(f"kind IN {MEMORY_KINDS}", name="ck_memories_kind"),
        CheckConstraint(f"char_length(content) BETWEEN 1 AND {MAX_CONTENT_CHARS}", name="ck_memories_content"),
    )

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, server_default=func.gen_random_uuid())
    namespace: Mapped[str] = mapped_column(Text)
    key: Mapped[str] = mapped_column(String(128))
    content: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16), server_default="semantic")
    # Provenance: dia_ids, session, session_date, speaker, source (and whatever a LangGraph app stores).
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, server_default="{}")
    embedding: Mapped[list[float] | None] = mapped_column(Embedding(get_settings().embedding_dims), nullable=True)
    # Insertion order: timestamps tie within a transaction, and `list()` and forks keep this order.
    seq: Mapped[int] = mapped_column(BigInteger, Identity())
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class MemoryEvent(Base):
    """One row per write, appended in the write's own transaction, so an episode can be diffed and replayed."""

    __tablename__ = "memory_events"
    __table_args__ = (Index("ix_memory_events_namespace", "namespace", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(Text)
    memory_key: Mapped[str | None] = mapped_column(String(128), nullable=True)
    op: Mapped[str] = mapped_column(String(16))
    before: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    episode: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
