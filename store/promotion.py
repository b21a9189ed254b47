"""A fork promoted onto its base, and rows put back, inside the caller's transaction: the store's
operations for a layer that writes a namespace together with its own tables in one transaction
(`bank.change_log` applies and undoes a change under its advisory lock).

    from memupdate.store.promotion import differing_keys, promote_rows, rows_by_key

    with bank.engine.begin() as conn:
        seen = edits_first_seen(conn, fork)                  # None: the fork has no event log (gone)
        differing_keys(conn, bank, fork)                     # [("k1", "changed"), ("k9", "added"), ...]
        rows_by_key(conn, bank, ["k1"], lock=True)           # {"k1": MemoryRecord(...)}, locked FOR UPDATE
        promote_rows(conn, bank, fork, removed=[], changed=["k1"], added=["k9"])
        bank.append_events([...], connection=conn)           # the caller logs what it wrote

Each takes the caller's connection and never commits: what a caller writes beside them (its own rows,
the event rows) commits or rolls back with them. Rows are moved in SQL (`INSERT ... SELECT`), so ids,
positions and the stored vectors themselves are kept exactly; `whole_rows` hands a caller the rows as
a SELECT to copy into a table of its own, and `restore_rows` takes such a SELECT back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy import Connection, Select, bindparam, delete, func, insert, select, update

from memupdate.store.codecs import record_of
from memupdate.store.memory_store import MemoryStore, copy_rows
from memupdate.store.records import MemoryRecord
from memupdate.store.statements import DROP, RECORD_COLUMNS, events, memories

Difference = Literal["removed", "changed", "added"]
# A row whole, in this order: what `whole_rows` selects and `restore_rows` inserts.
WHOLE_ROW = ("namespace", "id", "key", "content", "kind", "metadata", "embedding", "seq", "created_at", "updated_at")
_COMPARED = ("key", "content", "kind", "metadata", "embedding")
_WRITES = ("create", "update", "delete")


def edits_first_seen(conn: Connection, fork: MemoryStore) -> dict[str, dict[str, Any] | None] | None:
    """What the fork's first write of each key saw there (its event's `before`; None for a create), by
    key; None when the fork has no event log at all (it was dropped)."""
    if conn.execute(select(events.c.id).where(events.c.namespace == fork.path).limit(1)).first() is None:
        return None
    first_seen: dict[str, dict[str, Any] | None] = {}
    query = (
        select(events.c.memory_key, events.c.before)
        .where(events.c.namespace == fork.path, events.c.op.in_(_WRITES))
        .order_by(events.c.id)
    )
    for key, before in conn.execute(query):
        first_seen.setdefault(key, before)
    return first_seen


def differing_keys(
    conn: Connection, base: MemoryStore, fork: MemoryStore, keys: Sequence[str] | None = None
) -> list[tuple[str, Difference]]:
    """The keys where `fork` differs from `base` (content, kind, metadata or the stored vector), each
    `removed`, `changed` or `added` going from base to fork, compared in SQL; only `keys` when given."""
    columns = [memories.c[c] for c in _COMPARED]
    only = [memories.c.key.in_(list(keys))] if keys is not None else []
    left = select(*columns).where(memories.c.namespace == bindparam("base"), *only).subquery("b")
    right = select(*columns).where(memories.c.namespace == bindparam("fork"), *only).subquery("f")
    differs = (
        (left.c.content != right.c.content) | (left.c.kind != right.c.kind) | (left.c.metadata != right.c.metadata)
        | left.c.embedding.is_distinct_from(right.c.embedding)
    )
    rows = conn.execute(
        select(left.c.key.label("base_key"), right.c.key.label("fork_key"))
        .select_from(left.join(right, left.c.key == right.c.key, full=True))
        .where(left.c.key.is_(None) | right.c.key.is_(None) | differs),
        {"base": base.path, "fork": fork.path},
    ).all()
    return [
        (base_key or fork_key, "added" if base_key is None else "removed" if fork_key is None else "changed")
        for base_key, fork_key in rows
    ]


def rows_by_key(conn: Connection, store: MemoryStore, keys: Sequence[str], *, lock: bool = False) -> dict[str, MemoryRecord]:
    """The memories `keys` of `store` that exist, by key (in namespace order); with `lock`, locked FOR
    UPDATE until the caller's transaction ends (a concurrent write waits and lands after it)."""
    if not keys:
        return {}
    query = select(*RECORD_COLUMNS).where(memories.c.namespace == store.path, memories.c.key.in_(list(keys)))
    if lock:
        query = query.with_for_update()
    return {row.key: record_of(row) for row in conn.execute(query.order_by(memories.c.seq))}


def count_in(conn: Connection, store: MemoryStore) -> int:
    """How many memories `store`'s namespace holds, as the caller's transaction sees it."""
    return conn.execute(select(func.count()).select_from(memories).where(memories.c.namespace == store.path)).scalar_one()


def promote_rows(
    conn: Connection, base: MemoryStore, fork: MemoryStore, *, removed: Sequence[str], changed: Sequence[str],
    added: Sequence[str],
) -> None:
    """Make `base` hold what `fork` holds for these keys: `changed` rows take the fork's content, kind,
    metadata, vector and updated_at; `removed` rows are deleted; `added` rows are copied, vectors
    included, in the fork's order. No event rows: the caller logs what it wrote (`append_events`)."""
    if changed:
        forked = memories.alias("fork_rows")
        conn.execute(
            update(memories)
            .where(memories.c.namespace == base.path, memories.c.key.in_(list(changed)))
            .where(forked.c.namespace == fork.path, forked.c.key == memories.c.key)
            .values(content=forked.c.content, kind=forked.c.kind, metadata=forked.c.metadata,
                    embedding=forked.c.embedding, updated_at=forked.c.updated_at)
        )
    if removed:
        conn.execute(delete(memories).where(memories.c.namespace == base.path, memories.c.key.in_(list(removed))))
    if added:
        conn.execute(copy_rows(fork.path, base.path, added))


def whole_rows(store: MemoryStore, keys: Sequence[str]) -> Select:
    """The memories `keys` of `store` whole (`WHOLE_ROW`: id, seq, timestamps, the vector), as a SELECT
    for a caller to copy into a table of its own in one `INSERT ... SELECT` (a change's superseded rows)."""
    return select(*(memories.c[c] for c in WHOLE_ROW)).where(
        memories.c.namespace == store.path, memories.c.key.in_(list(keys))
    )


def restore_rows(conn: Connection, store: MemoryStore, remove: Sequence[str], rows: Select | None = None) -> None:
    """Delete the memories `remove` of `store`, then insert `rows` (a SELECT of `WHOLE_ROW`, e.g. from a
    table `whole_rows` filled) exactly as they were: ids, positions, timestamps and vectors. No event rows."""
    if remove:
        conn.execute(delete(memories).where(memories.c.namespace == store.path, memories.c.key.in_(list(remove))))
    if rows is not None:
        conn.execute(insert(memories).from_select(list(WHOLE_ROW), rows))


def keep_only(conn: Connection, store: MemoryStore, keys: Sequence[str]) -> None:
    """Delete every memory of `store` but `keys`, keeping its event log as it is (a shared fork shrunk to
    the rows its pending changes name: their checks read that log)."""
    conn.execute(delete(memories).where(memories.c.namespace == store.path, memories.c.key.not_in(list(keys))))


def drop_in(conn: Connection, store: MemoryStore) -> None:
    """`MemoryStore.drop` (memories and events) inside the caller's transaction."""
    conn.execute(DROP, {"namespace_path": store.path})


def episode_writes(
    conn: Connection, store: MemoryStore, episode: str, *, newest_first: bool = False
) -> list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]]:
    """The event rows of `store` tagged `episode` as (key, op, before, after), oldest first (or newest)."""
    order = events.c.id.desc() if newest_first else events.c.id
    query = select(events.c.memory_key, events.c.op, events.c.before, events.c.after).where(
        events.c.namespace == store.path, events.c.episode == episode
    )
    return [tuple(row) for row in conn.execute(query.order_by(order))]
