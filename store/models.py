"""The schema: `memories`, `memory_events` and `llm_replies` (SQLAlchemy 2 typed ORM; Alembic owns the DDL).

A memory lives in one namespace, a path such as `locomo/conv-26/traj/conv-26-qa3-1a2b3c4d`.
Its `key` is the id the tools and LangGraph see; a fork copies keys, so a memory keeps its id
in every trajectory forked from the same base and two namespaces can be diffed key by key.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal, get_args

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
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

# One definition of the kinds: the tool schema types with MemoryKind, the CHECK constraint lists MEMORY_KINDS.
MemoryKind = Literal["episodic", "semantic", "procedural"]
MEMORY_KINDS: tuple[str, ...] = get_args(MemoryKind)
# Documented limit on one memory's text: LoCoMo facts are ~100 characters; 4,000 leaves room for merges.
MAX_CONTENT_CHARS = 4000
LLM_REPLY_KINDS = ("answer", "judge")
SOURCE_KINDS = ("langgraph", "items", "texts")
CHANGE_STATUSES = ("proposed", "applied", "undone", "discarded")


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
    embedding: Mapped[list[float] | None] = mapped_column(Vector(get_settings().embedding_dims), nullable=True)
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


class LLMReply(Base):
    """A chat model's reply to one evaluation prompt, kept so a rerun or a resumed eval never re-asks.

    The key is everything the reply depends on at temperature 0: the model, the prompt template (its
    hash, so editing a prompt invalidates old replies), a hash of the variable input (for an answer the
    retrieved context; for a judgement the gold and generated answers) and the question.
    """

    __tablename__ = "llm_replies"
    __table_args__ = (
        UniqueConstraint("kind", "model", "template_hash", "input_hash", "question", name="uq_llm_replies_key"),
        CheckConstraint(f"kind IN {LLM_REPLY_KINDS}", name="ck_llm_replies_kind"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(Text)
    template_hash: Mapped[str] = mapped_column(String(64))
    input_hash: Mapped[str] = mapped_column(String(64))
    question: Mapped[str] = mapped_column(Text)
    reply: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


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
    embedding: Mapped[list[float] | None] = mapped_column(Vector(get_settings().embedding_dims), nullable=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    superseded_by: Mapped[list[str]] = mapped_column(JSONB, server_default="[]")
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    superseded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
