"""The `memories` and `events` tables and the store's prebuilt search statements (built once per process).

    from memupdate.store.statements import SEARCH_BY_VECTOR, memories
    conn.execute(SEARCH_BY_VECTOR, {"query_vector": vector, "namespace": "locomo/conv-26", "top_k": 5})
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Text,
    bindparam,
    cast,
    column,
    delete,
    func,
    insert,
    literal,
    literal_column,
    null,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from memupdate.store.codecs import VECTOR_PARAMETER
from memupdate.store.models import Memory, MemoryEvent
from memupdate.store.records import SEPARATOR

memories = Memory.__table__
events = MemoryEvent.__table__
# What a read returns: every column but the vector, which callers never need and is costly to parse.
RECORD_COLUMNS = tuple(c for c in memories.c if c.name != "embedding")

def version_columns(key, seq, updated_at) -> tuple:
    """A namespace's version (`NamespaceVersion`) over its rows' key, seq and updated_at: one definition,
    read by `MemoryStore.version` and, for the base, by every fork diff (`NamespaceChanges.base_version`)."""
    return func.count(key), func.max(seq), func.max(updated_at)


# The version of namespace `namespace` alone (`MemoryStore.version`).
VERSION = select(*version_columns(memories.c.key, memories.c.seq, memories.c.updated_at)).where(
    memories.c.namespace == bindparam("namespace")
)

# search_by_vector's statement, built once: the top-k sort carries (id, key, distance) instead of
# whole rows, and the k winners are fetched after (`memupdate bench store` measures it).
# The query vector travels in pgvector's binary form (no float text to format, nor for the server to parse).
_QUERY_VECTOR = cast(bindparam("query_vector", type_=VECTOR_PARAMETER), memories.c.embedding.type)
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



# -- writes that log their event row in the same statement (a data-modifying CTE: one round trip) ------

# What the store's own inserts write for a None before/after: JSON's null (JSONB's none_as_null is off).
_JSON_NULL = literal_column("'null'::jsonb", JSONB)
_EVENT_COLUMNS = ["namespace", "memory_key", "op", "before", "after", "episode"]


def as_event(table) -> ColumnElement:
    """SQL for `MemoryRecord.as_event()` of a row of `table` (jsonb that decodes to the same dict)."""
    return func.jsonb_build_object("key", table.c.key, "content", table.c.content, "kind", table.c.kind,
                                   "metadata", table.c.metadata)


def _logged(rows, op: str, before, after, order_by=None):
    """The insert of one `op` event per row of the CTE `rows` (before/after: SQL or None)."""
    source = select(
        bindparam("namespace_path", type_=Text), rows.c.key, literal(op, Text),
        before if before is not None else _JSON_NULL,
        after if after is not None else _JSON_NULL,
        bindparam("episode", type_=Text),
    )
    return insert(events).from_select(_EVENT_COLUMNS, source.order_by(order_by) if order_by is not None else source)


# delete: the rows `keys` removed and returned, one delete event each in the order of `keys`.
_KEYS = bindparam("keys", type_=ARRAY(Text))
_REMOVED = (
    delete(memories)
    .where(memories.c.namespace == bindparam("namespace_path"), memories.c.key == func.any(_KEYS))
    .returning(*RECORD_COLUMNS)
    .cte("removed")
)
DELETE_LOGGED = select(*_REMOVED.c).add_cte(
    _logged(_REMOVED, "delete", as_event(_REMOVED), None, func.array_position(_KEYS, _REMOVED.c.key)).cte("logged")
)

# get and delete of ONE key compare `key = :memory_key`: an array parameter (`= ANY(:keys)`) costs psycopg
# and the server about 0.07 ms more per call, a fifth of a get (`memupdate bench store`).
_ONE_KEY = (memories.c.namespace == bindparam("namespace_path", type_=Text)) & (memories.c.key == bindparam("memory_key"))
FETCH_ONE = select(*RECORD_COLUMNS).where(_ONE_KEY)
_REMOVED_ONE = delete(memories).where(_ONE_KEY).returning(*RECORD_COLUMNS).cte("removed")
DELETE_ONE_LOGGED = select(*_REMOVED_ONE.c).add_cte(_logged(_REMOVED_ONE, "delete", as_event(_REMOVED_ONE), None).cte("logged"))

# update: the row `memory_key` changed (a None new_* keeps that column), returned with its event row written.
# (Parameters named after no column of `memories`: an UPDATE would take those as values to SET.)
_OLD = (
    select(memories.c.id, memories.c.key, memories.c.content, memories.c.kind, memories.c.metadata)
    .where(memories.c.namespace == bindparam("namespace_path"), memories.c.key == bindparam("memory_key"))
    .with_for_update()
    .cte("old")
)
_UPDATED = (
    update(memories)
    .where(memories.c.id == _OLD.c.id)
    .values(
        content=func.coalesce(bindparam("new_content", type_=Text), memories.c.content),
        embedding=func.coalesce(bindparam("new_embedding", type_=memories.c.embedding.type), memories.c.embedding),
        kind=func.coalesce(bindparam("new_kind", type_=memories.c.kind.type), memories.c.kind),
        # none_as_null: a None keeps the metadata (JSON's null would replace it).
        metadata=func.coalesce(bindparam("new_metadata", type_=JSONB(none_as_null=True)), memories.c.metadata),
        updated_at=func.clock_timestamp(),
    )
    .returning(*RECORD_COLUMNS, as_event(_OLD).label("before"))
    .cte("updated")
)
UPDATE_LOGGED = select(*_UPDATED.c).add_cte(_logged(_UPDATED, "update", _UPDATED.c.before, as_event(_UPDATED)).cte("logged"))

# create (one memory): inserted and returned with its create event.
_CREATED = (
    insert(memories)
    .values(
        namespace=bindparam("namespace_path", type_=Text), key=bindparam("memory_key", type_=Text),
        content=bindparam("new_content", type_=Text), kind=bindparam("new_kind", type_=memories.c.kind.type),
        metadata=bindparam("new_metadata", type_=memories.c.metadata.type),
        embedding=bindparam("new_embedding", type_=memories.c.embedding.type),
    )
    .returning(*RECORD_COLUMNS)
    .cte("created")
)
CREATE_LOGGED = select(*_CREATED.c).add_cte(_logged(_CREATED, "create", None, as_event(_CREATED)).cte("logged"))

# fork: every memory of `source_path` copied (in seq order) into the empty `target_path`, with its fork
# event; nothing is written when the target holds memories (`taken`: every part of the statement sees
# the namespace as it was before it).
_TARGET, _SOURCE = bindparam("target_path", type_=Text), bindparam("source_path", type_=Text)
_TAKEN = select(memories.c.id).where(memories.c.namespace == _TARGET).exists()
_COPIED_COLUMNS = ("key", "content", "kind", "metadata", "embedding", "created_at", "updated_at")
_COPIED = (
    insert(memories)
    .from_select(
        ["namespace", *_COPIED_COLUMNS],
        select(_TARGET, *(memories.c[name] for name in _COPIED_COLUMNS))
        .where(memories.c.namespace == _SOURCE, ~_TAKEN)
        .order_by(memories.c.seq),
    )
    .returning(memories.c.id)
    .cte("copied")
)
_FORK_EVENT = insert(events).from_select(
    _EVENT_COLUMNS,
    select(
        _TARGET, null(), literal("fork", Text), _JSON_NULL,
        func.jsonb_build_object("source", _SOURCE, "memories", func.count()), bindparam("episode", type_=Text),
    )
    .select_from(_COPIED)
    .having(~_TAKEN),
)
FORK_LOGGED = select(
    _TAKEN.label("taken"), select(func.count()).select_from(_COPIED).scalar_subquery().label("copied")
).add_cte(_FORK_EVENT.cte("logged"))

# drop: every memory of `namespace_path` deleted, and its events (DROP) or a drop event (DROP_KEEPING_EVENTS).
_DROPPED = delete(memories).where(memories.c.namespace == bindparam("namespace_path")).returning(memories.c.id).cte("dropped")
_DROPPED_COUNT = select(func.count().label("removed")).select_from(_DROPPED)
DROP = _DROPPED_COUNT.add_cte(
    delete(events).where(events.c.namespace == bindparam("namespace_path")).cte("events_dropped")
)
DROP_KEEPING_EVENTS = _DROPPED_COUNT.add_cte(
    insert(events).from_select(
        _EVENT_COLUMNS,
        select(
            bindparam("namespace_path", type_=Text), null(), literal("drop", Text), _JSON_NULL,
            func.jsonb_build_object("memories", func.count()), bindparam("episode", type_=Text),
        ).select_from(_DROPPED),
    ).cte("logged")
)

# replace (merge, split): the rows `keys` removed and the new rows created, with a delete event each (in
# the order of `keys`) then a create event each (in the order given), in ONE statement. Nothing is
# written unless every key is found (`complete`); the insert waits on the delete (it counts `removed`),
# so a new row may take a removed row's key. The new rows travel as parallel arrays (vectors as
# pgvector text, which reads back as the very float4s); returns the removed rows then the created ones.
REPLACE_LOGGED = text(
    """
    WITH locked AS (
        SELECT id, namespace, key, content, kind, metadata, seq, created_at, updated_at FROM memories
        WHERE namespace = :namespace_path AND key = ANY(CAST(:keys AS text[])) FOR UPDATE
    ), complete AS (
        SELECT count(*) = cardinality(CAST(:keys AS text[])) AS ok FROM locked
    ), removed AS (
        DELETE FROM memories WHERE id IN (SELECT id FROM locked) AND (SELECT ok FROM complete) RETURNING id
    ), created AS (
        INSERT INTO memories (namespace, key, content, kind, metadata, embedding)
        SELECT :namespace_path, new.key, new.content, new.kind, new.metadata, new.embedding
        FROM unnest(CAST(:new_keys AS text[]), CAST(:new_contents AS text[]), CAST(:new_kinds AS text[]),
                    CAST(CAST(:new_metadata AS text[]) AS jsonb[]), CAST(CAST(:new_embeddings AS text[]) AS vector[]))
             WITH ORDINALITY AS new (key, content, kind, metadata, embedding, position)
        WHERE (SELECT count(*) FROM removed) = cardinality(CAST(:keys AS text[]))
        ORDER BY new.position
        RETURNING id, namespace, key, content, kind, metadata, seq, created_at, updated_at
    ), logged AS (
        INSERT INTO memory_events (namespace, memory_key, op, before, after, episode)
        SELECT :namespace_path, key, op, before, after, :episode FROM (
            SELECT 1 AS phase, array_position(CAST(:keys AS text[]), key::text) AS position, key, 'delete' AS op,
                   jsonb_build_object('key', key, 'content', content, 'kind', kind, 'metadata', metadata) AS before,
                   'null'::jsonb AS after
            FROM locked WHERE (SELECT ok FROM complete)
            UNION ALL
            SELECT 2, array_position(CAST(:new_keys AS text[]), key::text), key, 'create', 'null'::jsonb,
                   jsonb_build_object('key', key, 'content', content, 'kind', kind, 'metadata', metadata)
            FROM created
        ) AS event ORDER BY phase, position
    )
    SELECT 'removed' AS side, * FROM locked
    UNION ALL
    SELECT 'created', * FROM created
    """
)
