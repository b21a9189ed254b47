"""The `memories` and `events` tables and the store's prebuilt search statements (built once per process).

    from memupdate.store.statements import SEARCH_BY_VECTOR, memories
    conn.execute(SEARCH_BY_VECTOR, {"query_vector": vector, "namespace": "locomo/conv-26", "top_k": 5})
"""

from __future__ import annotations

from sqlalchemy import ARRAY, ColumnElement, Text, bindparam, cast, column, func, select, true

from memupdate.store.models import Memory, MemoryEvent
from memupdate.store.records import SEPARATOR

memories = Memory.__table__
events = MemoryEvent.__table__
# What a read returns: every column but the vector, which callers never need and is costly to parse.
RECORD_COLUMNS = tuple(c for c in memories.c if c.name != "embedding")

# search_by_vector's statement, built once: the top-k sort carries (id, key, distance) instead of
# whole rows, and the k winners are fetched after (`memupdate bench store` measures it).
_QUERY_VECTOR = bindparam("query_vector", type_=memories.c.embedding.type)
_DISTANCE = memories.c.embedding.cosine_distance(_QUERY_VECTOR)
_TOP_K = (
    select(memories.c.id, memories.c.key, _DISTANCE.label("distance"))
    .where(memories.c.namespace == bindparam("namespace"), memories.c.embedding.is_not(None))
    .order_by(_DISTANCE, memories.c.key)  # key breaks ties, so equal namespaces rank identically
    .limit(bindparam("top_k"))
    .cte("top_k")
)
SEARCH_BY_VECTOR = (
    select(*RECORD_COLUMNS, _TOP_K.c.distance)
    .join_from(memories, _TOP_K, memories.c.id == _TOP_K.c.id)
    .order_by(_TOP_K.c.distance, _TOP_K.c.key)
)

# search_many_by_vector's statement: the same top-k, once per query vector (a LATERAL join over the
# unnested vectors), so the QA proxy scores all of a fork's questions in one round trip. The vectors
# travel as text that reads back as the very float4s `search_by_vector` sends: the same distances and ranks.
QUERY_VECTORS = (
    func.unnest(cast(bindparam("query_vectors", type_=ARRAY(Text)), ARRAY(memories.c.embedding.type)))
    .table_valued(column("query_vector", memories.c.embedding.type), with_ordinality="ordinal")
    .render_derived()
)
_MANY_DISTANCE = memories.c.embedding.cosine_distance(QUERY_VECTORS.c.query_vector)
_TOP_K_EACH = (
    select(memories.c.id, memories.c.key, _MANY_DISTANCE.label("distance"))
    .where(memories.c.namespace == bindparam("namespace"), memories.c.embedding.is_not(None))
    .order_by(_MANY_DISTANCE, memories.c.key)
    .limit(bindparam("top_k"))
    .correlate(QUERY_VECTORS)
    .lateral("top_k")
)
SEARCH_MANY_BY_VECTOR = (
    select(QUERY_VECTORS.c.ordinal, *RECORD_COLUMNS, _TOP_K_EACH.c.distance)
    .select_from(QUERY_VECTORS.join(_TOP_K_EACH, true()).join(memories, memories.c.id == _TOP_K_EACH.c.id))
    .order_by(QUERY_VECTORS.c.ordinal, _TOP_K_EACH.c.distance, _TOP_K_EACH.c.key)
)


def in_subtree(path: str) -> ColumnElement[bool]:
    """SQL for "the namespace is `path` or below it" (a prefix LIKE the namespace index serves)."""
    pattern = path.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + SEPARATOR + "%"
    return (memories.c.namespace == path) | memories.c.namespace.like(pattern)

