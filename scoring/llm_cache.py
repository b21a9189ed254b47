"""The reply cache of the LLM answerer and judge: one row per prompt ever answered, in `llm_replies`.

    from memupdate.scoring.llm_cache import LLMReplyCache, ReplyKey, prompt_digest
    cache = LLMReplyCache(engine)
    question, context = "When did Ann move?", "Ann moved to Oslo on 7 May 2023."
    key = ReplyKey("answer", "qwen2.5-7b", prompt_digest("Answer from: {context}"), prompt_digest(question, context), question)
    cache.get_many([key])          # {} the first time
    cache.put(key, "7 May 2023")   # committed at once, so a run that dies keeps what it has
    cache.get_many([key])          # {key: "7 May 2023"}

The cache knows nothing of prompts: callers hash their template and input (`prompt_digest`).
Its table is declared here, its one user, on the store's `Base` (one metadata for `alembic check`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Engine,
    String,
    Text,
    UniqueConstraint,
    func,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Mapped, mapped_column

from memupdate.store import Base

LLM_REPLY_KINDS = ("answer", "judge")

# Rows per lookup query: keeps the IN list of key tuples well under PostgreSQL's parameter limit.
_LOOKUP_CHUNK = 500


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


class ReplyKey(NamedTuple):
    kind: str  # "answer" | "judge"
    model: str
    template_hash: str
    input_hash: str
    question: str


def prompt_digest(*parts: str) -> str:
    """sha256 hex of prompt texts (a template, a context, a question), separated so ("ab", "c") and
    ("a", "bc") differ: the reply cache's key parts."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\x00")
    return digest.hexdigest()


class LLMReplyCache:
    def __init__(self, engine: Engine):
        self.engine = engine

    def get_many(self, keys: Sequence[ReplyKey]) -> dict[ReplyKey, str]:
        """The cached replies among `keys`; missing keys are absent from the result."""
        found: dict[ReplyKey, str] = {}
        unique = list(dict.fromkeys(keys))
        columns = (
            LLMReply.kind,
            LLMReply.model,
            LLMReply.template_hash,
            LLMReply.input_hash,
            LLMReply.question,
        )
        with self.engine.connect() as conn:
            for start in range(0, len(unique), _LOOKUP_CHUNK):
                chunk = unique[start : start + _LOOKUP_CHUNK]
                rows = conn.execute(select(*columns, LLMReply.reply).where(tuple_(*columns).in_(chunk)))
                for row in rows:
                    found[ReplyKey(*row[:5])] = row[5]
        return found

    def put(self, key: ReplyKey, reply: str) -> None:
        """Store one reply in its own transaction; a reply already stored for `key` is kept."""
        statement = (
            insert(LLMReply)
            .values(**key._asdict(), reply=reply)
            .on_conflict_do_nothing(constraint="uq_llm_replies_key")
        )
        with self.engine.begin() as conn:
            conn.execute(statement)

    def count(self, kind: str | None = None, model: str | None = None) -> int:
        """How many replies are stored (of one kind and model, when given)."""
        query = select(func.count()).select_from(LLMReply)
        if kind is not None:
            query = query.where(LLMReply.kind == kind)
        if model is not None:
            query = query.where(LLMReply.model == model)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())
