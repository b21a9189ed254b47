"""How values travel between Python and PostgreSQL: rows to records, vectors to pgvector's text, its
binary form and back.

    from memupdate.store.codecs import VECTOR_PARAMETER, record_of, vector_text
    vector_text(np.array([0.5, 1.0], dtype=np.float32))      # '[0.5,1.0]'
    record_of(row)                                           # a MemoryRecord from a row of RECORD_COLUMNS
    cast(bindparam("query_vector", type_=VECTOR_PARAMETER), Vector(384))   # a numpy vector sent as binary
    mapped_column(Embedding(384))                            # a column whose written vectors go as binary
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import psycopg
from pgvector.sqlalchemy import Vector
from psycopg.adapt import Dumper
from psycopg.pq import Format
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



class VectorSend(bytes):
    """A vector in pgvector's binary form (`vector_send`), which psycopg sends as a binary parameter."""

    __slots__ = ()

    @classmethod
    def of(cls, vector: np.ndarray | Sequence[float]) -> VectorSend:
        values = np.asarray(vector, dtype=">f4")
        return cls(struct.pack(">hh", values.shape[0], 0) + values.tobytes())


class _VectorSendDumper(Dumper):
    # No type oid: the statement casts the parameter to vector, so the server reads it with vector_recv.
    format = Format.BINARY

    def dump(self, obj: VectorSend) -> bytes:
        return obj


# Registered on psycopg's global adapters, which every connection copies when it opens (and the
# store's engines are made after this module is imported).
psycopg.adapters.register_dumper(VectorSend, _VectorSendDumper)


class Embedding(Vector):
    """pgvector's `vector(dims)`, each bound value sent in its binary form: no float-to-text on the client
    (pgvector's own type prints ~400 float64s, 200 µs a row), no parsing on the server, the very float4s
    the text form would give. The embedding columns' type (the server infers a written parameter's type
    from the column) and, without dims, a query vector's (`VECTOR_PARAMETER`, cast in the statement)."""

    cache_ok = True

    def bind_processor(self, dialect):
        return lambda value: None if value is None else VectorSend.of(value)


VECTOR_PARAMETER = Embedding()
