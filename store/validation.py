"""What the store checks before it writes, and the schema check it makes once per database.

    from memupdate.store.validation import check_content, holds_nul
    check_content("")            # InvalidMemory: memory content is empty: give the text to remember
    holds_nul({"a": "x\x00"})    # True: PostgreSQL's text and jsonb cannot store NUL
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import ProgrammingError

from memupdate.store.embeddings import Embedder
from memupdate.store.errors import DatabaseError, EmbeddingDimensionMismatch, InvalidMemory
from memupdate.store.models import MAX_CONTENT_CHARS, MEMORY_KINDS


def check_schema(engine: Engine, embedder: Embedder) -> int:
    """The vector column's size, after checking the schema is migrated and `embedder` fits the column
    (the database is queried once per process)."""
    url = str(engine.url)
    if url not in _column_dims:
        try:
            with engine.connect() as conn:
                _column_dims[url] = conn.execute(
                    text("SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname = 'embedding'")
                ).scalar_one()
        except ProgrammingError:
            raise DatabaseError(
                f"database {engine.url.render_as_string(hide_password=True)} has no memupdate schema: "
                "run `memupdate db upgrade`"
            ) from None
    if embedder.dims != _column_dims[url]:
        raise _dims_error(embedder, _column_dims[url])
    return _column_dims[url]


# Engine URL -> size of the memories.embedding column, read once per process.
_column_dims: dict[str, int] = {}


def _dims_error(embedder: Embedder, column_dims: int) -> EmbeddingDimensionMismatch:
    return EmbeddingDimensionMismatch(
        f"embedding model {embedder.name!r} makes {embedder.dims}-dim vectors but the memories.embedding column "
        f"holds {column_dims}: set MEMUPDATE_EMBEDDING_MODEL to a {column_dims}-dim model, or use a fresh "
        f"database with MEMUPDATE_EMBEDDING_DIMS={embedder.dims} and run `memupdate db upgrade`"
    )


def holds_nul(value: Any) -> bool:
    """Whether a string, or any key or string inside a JSON value, holds NUL, which PostgreSQL's text and
    jsonb cannot store."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(holds_nul(v) for v in value)
    return False


def check_content(content: str) -> None:
    if not isinstance(content, str) or not content.strip():
        raise InvalidMemory("memory content is empty: give the text to remember")
    if holds_nul(content):
        raise InvalidMemory("memory content holds a NUL character (\\x00), which PostgreSQL cannot store: remove it")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidMemory(
            f"memory content has {len(content)} characters, over the limit of {MAX_CONTENT_CHARS}: split it"
        )


def check_metadata(metadata: dict[str, Any]) -> None:
    if holds_nul(metadata):
        raise InvalidMemory("memory metadata holds a NUL character (\\x00), which PostgreSQL cannot store: remove it")


def check_kind(kind: str) -> None:
    if kind not in MEMORY_KINDS:
        raise InvalidMemory(f"memory kind {kind!r} is not one of {', '.join(MEMORY_KINDS)}")

