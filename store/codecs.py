"""How values travel between Python and PostgreSQL: rows to records, vectors to pgvector's text and back.

    from memupdate.store.codecs import record_of, vector_text
    vector_text(np.array([0.5, 1.0], dtype=np.float32))      # '[0.5,1.0]'
    record_of(row)                                           # a MemoryRecord from a row of RECORD_COLUMNS
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from sqlalchemy import Row

from memupdate.store.records import SEPARATOR, MemoryRecord


def record_of(row: Row) -> MemoryRecord:
    """The record of a row holding `RECORD_COLUMNS`."""
    return MemoryRecord(
        key=row.key,
        namespace=tuple(row.namespace.split(SEPARATOR)),
        content=row.content,
        kind=row.kind,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


@lru_cache(maxsize=4096)
def _vector_text_of(data: bytes) -> str:
    # numpy prints a float32 as the shortest text that reads back as the same float32 (pgvector reads
    # it with strtof): half the bytes of pgvector's own float64 text, the same vector on the server.
    return "[" + ",".join(map(str, np.frombuffer(data, dtype=np.float32))) + "]"


def vector_text(vector: np.ndarray | Sequence[float]) -> str:
    """pgvector's text form of `vector`, cached: the QA proxy sends the same question vectors for a
    base and all its forks."""
    return _vector_text_of(np.asarray(vector, dtype=np.float32).tobytes())


def from_vector_send(data: bytes | None, dims: int) -> np.ndarray:
    """Decode pgvector's binary form (int16 dims, int16 unused, then big-endian float4s)."""
    if data is None:
        return np.zeros(dims, dtype=np.float32)
    return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)

