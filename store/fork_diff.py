"""How a fork differs from its base, compared in SQL: counts, the changed rows, and (on request) each changed
row's distance to given query vectors and a new row's nearest base rows.

    from memupdate.store.fork_diff import changes_from
    changes = changes_from(fork, base)                       # counts, written memories, the base's version
    changes.memories_before, changes.edited, changes.written, changes.base_version
    changes_from(fork, base, question_vectors).changed_hits  # each changed memory's distance to each question
    changes_from(fork, base, nearest=3).nearest_keys         # each new key's 3 closest base memories

Neither namespace is read whole: the two are joined by key in the database, and only the rows the fork
changed come back, all in one statement (one round trip, no transaction: a read in autocommit mode).
It is storage, so it stays in the store: one statement over the store's own tables, codecs and
autocommit path. Its reader is the reward (`scoring/qa_proxy.py`), which scores a fork from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import (
    ARRAY,
    Float,
    Select,
    Text,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    select,
    true,
    union_all,
)

from memupdate.store.codecs import VECTOR_PARAMETER, record_of
from memupdate.store.records import (
    MemoryRecord,
    Namespace,
    NamespaceVersion,
    ScoredMemory,
    namespace_path,
    to_namespace,
)
from memupdate.store.statements import RECORD_COLUMNS, memories, version_columns

if TYPE_CHECKING:
    from memupdate.store.memory_store import MemoryStore

# The base's and the fork's rows joined by key, compared in SQL.
_BASE = select(
    memories.c.key, memories.c.content, memories.c.kind, memories.c.metadata, memories.c.embedding,
    memories.c.seq, memories.c.updated_at,
).where(memories.c.namespace == bindparam("base")).subquery("base")
# Only what the comparison reads: a changed row's record and embedding are fetched by id after.
_FORK = (
    select(memories.c.id, memories.c.key, memories.c.content, memories.c.kind, memories.c.metadata, memories.c.embedding)
    .where(memories.c.namespace == bindparam("fork"))
    .subquery("fork")
)
_BY_KEY = _BASE.join(_FORK, _BASE.c.key == _FORK.c.key, full=True)
# Each comparison once per key (what `MemoryRecord.as_event()` compares; jsonb equality is Python's dict
# equality of the decoded values): the verdicts below combine these flags, so no text, jsonb or vector
# is compared twice. NULL where either side is missing.
_CONTENT_MOVED = _BASE.c.content != _FORK.c.content
_ATTRIBUTES_MOVED = (_BASE.c.kind != _FORK.c.kind) | (_BASE.c.metadata != _FORK.c.metadata)
_VECTOR_MOVED = _BASE.c.embedding.is_distinct_from(_FORK.c.embedding)
# Every key of either side once, with those flags; referenced twice below, so PostgreSQL computes it
# once. It holds no text or vector: materialising those for every row cost more than the join.
_ROWS = (
    select(
        _BASE.c.key.label("base_key"), _BASE.c.seq.label("base_seq"), _BASE.c.updated_at.label("base_updated_at"),
        _FORK.c.id.label("fork_id"), _FORK.c.key.label("fork_key"),
        _CONTENT_MOVED.label("content_moved"), _ATTRIBUTES_MOVED.label("attributes_moved"),
        _VECTOR_MOVED.label("vector_moved"),
    )
    .select_from(_BY_KEY)
    .cte("by_key")
)
# Added, removed, or another content, kind or metadata.
_EDITED = _ROWS.c.base_key.is_(None) | _ROWS.c.fork_key.is_(None) | _ROWS.c.content_moved | _ROWS.c.attributes_moved
# A row a search could see differently: edited, or re-embedded.
_REPLACED = _EDITED | _ROWS.c.vector_moved
_WRITTEN = _ROWS.c.base_key.is_(None) | _ROWS.c.content_moved
# A changed row of the fork, read whole by its id (the few rows the fork changed, not all of them).
_CHANGED_ROW = memories.alias("changed_row")


_BASE_COUNT, _BASE_SEQ, _BASE_UPDATED_AT = version_columns(_ROWS.c.base_key, _ROWS.c.base_seq, _ROWS.c.base_updated_at)
CHANGE_COUNTS = select(
    _BASE_COUNT.label("before"),
    func.count(_ROWS.c.fork_key).label("after"),
    func.count().filter(_EDITED).label("edited"),
    func.coalesce(
        func.array_agg(_ROWS.c.base_key).filter(_ROWS.c.base_key.is_not(None) & _REPLACED),
        literal([], ARRAY(Text)),
    ).label("replaced"),
    _BASE_SEQ.label("base_seq"),
    _BASE_UPDATED_AT.label("base_updated_at"),
)
# The base's memories nearest a new key's embedding, ranked as `MemoryStore.search` ranks them (distance,
# then key): the sources of a memory whose provenance names none.
_NEAREST_BASE = memories.alias("nearest_base")


def _nearest_keys(nearest: int):
    """The `nearest` base keys closest to a new row's embedding. `nearest` is a literal, not a parameter:
    with LIMIT unknown the planner costs the generic plan above the custom ones and plans every call anew
    (a third of the statement's server time); with it known, the prepared statement keeps one plan."""
    return case(
        (
            _ROWS.c.base_key.is_(None) & _CHANGED_ROW.c.embedding.is_not(None),
            func.array(
                select(_NEAREST_BASE.c.key)
                .where(_NEAREST_BASE.c.namespace == bindparam("base"), _NEAREST_BASE.c.embedding.is_not(None))
                .order_by(_NEAREST_BASE.c.embedding.cosine_distance(_CHANGED_ROW.c.embedding), _NEAREST_BASE.c.key)
                .limit(literal_column(str(int(nearest))))
                .correlate(_ROWS, _CHANGED_ROW)
                .scalar_subquery()
            ),
        ),
        else_=None,
    )


@lru_cache(maxsize=64)
def _diff_statement(query_vectors: int, nearest: int) -> Select:
    """The counts and the changed rows (each with its distance to every query vector and, for a new key,
    its `nearest` base keys) in ONE statement: the counts' one row, joined to each changed row. The query
    vectors are bound one parameter each, in pgvector's binary form."""
    if query_vectors:
        given = union_all(*(
            select(
                literal(i + 1).label("ordinal"),
                cast(bindparam(f"query_vector_{i}", type_=VECTOR_PARAMETER), memories.c.embedding.type).label("query_vector"),
            )
            for i in range(query_vectors)
        )).subquery("query_vectors")
        distances = func.array(
            select(_CHANGED_ROW.c.embedding.cosine_distance(given.c.query_vector))
            .select_from(given)
            .order_by(given.c.ordinal)
            .correlate(_CHANGED_ROW)
            .scalar_subquery()
        )
    else:
        distances = literal(None, ARRAY(Float))
    changed = (
        select(
            *(_CHANGED_ROW.c[c.name] for c in RECORD_COLUMNS), _WRITTEN.label("written"), distances.label("distances"),
            _nearest_keys(nearest).label("nearest"),
        )
        .join_from(_ROWS, _CHANGED_ROW, _CHANGED_ROW.c.id == _ROWS.c.fork_id)
        .where(_REPLACED)
        .subquery("changed")
    )
    counts = CHANGE_COUNTS.subquery("counts")
    return select(counts, changed).select_from(counts.outerjoin(changed, true())).order_by(changed.c.seq)


@dataclass(frozen=True)
class NamespaceChanges:
    """How a namespace differs from the one it was forked from, read in SQL (`changes_from`)."""

    memories_before: int
    memories_after: int
    edited: int  # keys added, removed, or with another content, kind or metadata
    written: list[MemoryRecord]  # memories whose text the base does not hold under the same key, in order
    replaced: frozenset[str] = frozenset()  # base keys the fork removed, edited or re-embedded
    # Per query vector given: the fork's new, edited or re-embedded memories as (cosine distance, hit).
    changed_hits: list[list[tuple[float, ScoredMemory]]] = field(default_factory=list)
    base_version: NamespaceVersion | tuple = ()  # the base's version (`MemoryStore.version`): moves with every write
    # With `nearest`: each new key's `nearest` base keys closest to its embedding (as `base.search` ranks).
    nearest_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)



def changes_from(
    fork: MemoryStore,
    base: MemoryStore | Namespace | str,
    query_vectors: Sequence[np.ndarray] | None = None,
    *,
    nearest: int = 0,
) -> NamespaceChanges:
    """Counts and written memories of `fork` against `base`, compared in SQL, without reading either
    namespace whole, in one statement. With `query_vectors`, also the distance of every new, edited or
    re-embedded memory to each of them (`changed_hits`), so a search of the fork is the base's hits minus
    `replaced` plus those. With `nearest`, each new key's `nearest` closest base keys (`nearest_keys`)."""
    base_path = base.path if hasattr(base, "path") else namespace_path(to_namespace(base))
    vectors = list(query_vectors) if query_vectors is not None else []
    params = {"base": base_path, "fork": fork.path}
    params.update((f"query_vector_{i}", vector) for i, vector in enumerate(vectors))
    statement = _diff_statement(len(vectors), nearest)
    rows = fork._autocommitted(lambda conn: conn.execute(statement, params).all())
    counts = rows[0]
    written, hits, nearest_keys = [], [[] for _ in vectors], {}
    for row in rows:
        if row.key is None:  # the counts' row when nothing changed
            continue
        record = record_of(row)
        if row.written:
            written.append(record)
        if nearest and row.nearest is not None:
            nearest_keys[row.key] = tuple(row.nearest)
        for i, distance in enumerate(row.distances or []):
            if distance is not None:  # no embedding: no search finds it
                hits[i].append((float(distance), ScoredMemory(record, 1.0 - float(distance))))
    return NamespaceChanges(
        counts.before, counts.after, counts.edited, written, frozenset(counts.replaced), hits,
        NamespaceVersion(counts.before, counts.base_seq, counts.base_updated_at), nearest_keys,
    )
