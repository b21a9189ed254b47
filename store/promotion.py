"""A fork promoted onto its base, and a promotion undone, each one operation inside the caller's
transaction: for a layer that writes a namespace together with its own tables (`bank.change_log`
applies and undoes a change under its advisory lock, keeping the replaced rows in a table of its own).

    from memupdate.store import PromotionConflict, promote_fork, undo_promotion

    with bank.engine.begin() as conn:
        done = promote_fork(conn, bank, fork, episode="change:7",          # the bank now holds the fork
                            keep_replaced=lambda keys, rows: copy_into_my_table(conn, rows))
        done.removed, done.changed, done.added                             # ["k3"], ["k1"], ["k9"]
    with bank.engine.begin() as conn:
        undo_promotion(conn, bank, "change:7", as_episode="undo:7",        # the bank as it was, exactly
                       rows_before=lambda keys: select_from_my_table(keys))

Each takes the caller's connection and never commits: what a caller writes beside them (its own rows)
commits or rolls back with them, and a `PromotionConflict` (the base was written since) leaves nothing
written. Rows are moved in SQL (`INSERT ... SELECT`), so ids, positions and the stored vectors
themselves are kept exactly; each write is logged in the base's event log under the episode given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, Select, bindparam, delete, func, insert, select, update

from memupdate.store.codecs import record_of
from memupdate.store.errors import PromotionConflict
from memupdate.store.memory_store import MemoryStore, copy_rows
from memupdate.store.records import MemoryRecord, NewEvent
from memupdate.store.statements import DROP, RECORD_COLUMNS, events, memories

Difference = Literal["removed", "changed", "added"]
# A row whole, in this order: what `keep_replaced` is handed and `rows_before` gives back.
WHOLE_ROW = ("namespace", "id", "key", "content", "kind", "metadata", "embedding", "seq", "created_at", "updated_at")
_COMPARED = ("key", "content", "kind", "metadata", "embedding")
_WRITES = ("create", "update", "delete")


@dataclass(frozen=True)
class Promotion:
    """What `promote_fork` wrote: the keys the base lost, changed and gained, and its size before and after."""

    removed: list[str]
    changed: list[str]
    added: list[str]
    memories_before: int
    memories_after: int


def promote_fork(
    conn: Connection, base: MemoryStore, fork: MemoryStore, *, episode: str, keys: Sequence[str] | None = None,
    keep_replaced: Callable[[list[str], Select], None] | None = None,
) -> Promotion:
    """Make `base` hold what `fork` holds (only `keys`, one part of the fork, when given), provided the
    base is as it was when the fork was made: every key the fork's edits touched holds what the fork's
    first edit of it saw, and every other key compared is the same on both sides (content, kind,
    metadata, the stored vector); else `PromotionConflict` naming the key, and nothing is written. The
    rows checked stay locked until the caller's transaction ends, so a concurrent write to one of them
    waits and lands after the promotion instead of being overwritten.

    `keep_replaced(keys, rows)` runs before anything is written when some rows are to be replaced or
    removed, with them whole as a SELECT of `WHOLE_ROW` (for a caller to copy into a table of its own).
    Each write is logged in the base's event log under `episode` (delete, update, create)."""
    removed, changed, added = _fork_differences(conn, base, fork, keys)
    base_rows = _rows_by_key(conn, base, removed + changed)
    fork_rows = _rows_by_key(conn, fork, changed + added)
    before = _count_in(conn, base)
    after = before - len(removed) + len(added) if keys is not None else _count_in(conn, fork)
    if keep_replaced is not None and removed + changed:
        keep_replaced(removed + changed, _whole_rows(base, removed + changed))
    _promote_rows(conn, base, fork, removed=removed, changed=changed, added=added)
    base.scoped(base.namespace, episode=episode).append_events(
        [NewEvent("delete", k, base_rows[k].as_event(), None) for k in removed]
        + [NewEvent("update", k, base_rows[k].as_event(), fork_rows[k].as_event()) for k in changed]
        + [NewEvent("create", k, None, fork_rows[k].as_event()) for k in added],
        connection=conn,
    )
    return Promotion(removed, changed, added, before, after)


def undo_promotion(
    conn: Connection, store: MemoryStore, episode: str, *, as_episode: str,
    rows_before: Callable[[list[str]], Select],
) -> None:
    """Undo the writes `store`'s event log holds under `episode` (a `promote_fork`), newest first,
    provided every key written still holds what was written there (else `PromotionConflict` naming the
    key, and nothing is written): the rows written are deleted and `rows_before(keys)` (a SELECT of
    `WHOLE_ROW`: the rows the writes updated or deleted, as `keep_replaced` was handed them; asked only
    when there are any) is inserted back exactly, ids, positions and vectors included. The inverse
    writes are logged under `as_episode`."""
    logged = _episode_writes(conn, store, episode, newest_first=True)
    keys = [key for key, *_ in logged]
    current = _rows_by_key(conn, store, keys, lock=True)
    for key, _op, _before, after in logged:
        now = current[key].as_event() if key in current else None
        if now != after:
            raise PromotionConflict(
                f"memory {key!r} of {store.path!r} was written after {episode!r}: nothing was undone", key,
                expected=after, found=now,
            )
    restore = [k for k, op, _b, _a in logged if op in ("update", "delete")]
    _restore_rows(conn, store, keys, rows_before(restore) if restore else None)
    store.scoped(store.namespace, episode=as_episode).append_events(
        [_inverse(key, op, before, after) for key, op, before, after in logged], connection=conn
    )


def _inverse(key: str, op: str, before: dict | None, after: dict | None) -> NewEvent:
    if op == "create":
        return NewEvent("delete", key, after, None)
    if op == "update":
        return NewEvent("update", key, after, before)
    return NewEvent("create", key, None, before)


def _fork_differences(
    conn: Connection, base: MemoryStore, fork: MemoryStore, keys: Sequence[str] | None
) -> tuple[list[str], list[str], list[str]]:
    """The keys the fork removed, changed and added, once the base is checked to be as the fork found it
    (see `promote_fork`); the rows checked are locked FOR UPDATE."""
    first_seen = _edits_first_seen(conn, fork)
    if first_seen is None:
        raise PromotionConflict(f"fork {fork.path!r} is gone (it has no event log): fork the base again")
    found: dict[str, list[str]] = {"removed": [], "changed": [], "added": []}
    for key, difference in _differing_keys(conn, base, fork, keys):
        if key not in first_seen:
            raise PromotionConflict(_moved(base, fork, key), key)
        found[difference].append(key)
    checked = {k: v for k, v in first_seen.items() if keys is None or k in keys}
    now = _rows_by_key(conn, base, list(checked), lock=True)
    for key, seen in checked.items():
        found_now = now[key].as_event() if key in now else None
        if found_now != seen:
            raise PromotionConflict(_moved(base, fork, key), key, expected=seen, found=found_now)
    return found["removed"], found["changed"], found["added"]


def _moved(base: MemoryStore, fork: MemoryStore, key: str) -> str:
    return f"{base.path!r} changed since {fork.path!r} was forked from it (memory {key!r} differs): nothing was promoted"


def _edits_first_seen(conn: Connection, fork: MemoryStore) -> dict[str, dict[str, Any] | None] | None:
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


def _differing_keys(
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


def _rows_by_key(conn: Connection, store: MemoryStore, keys: Sequence[str], *, lock: bool = False) -> dict[str, MemoryRecord]:
    """The memories `keys` of `store` that exist, by key (in namespace order); with `lock`, locked FOR
    UPDATE until the caller's transaction ends (a concurrent write waits and lands after it)."""
    if not keys:
        return {}
    query = select(*RECORD_COLUMNS).where(memories.c.namespace == store.path, memories.c.key.in_(list(keys)))
    if lock:
        query = query.with_for_update()
    return {row.key: record_of(row) for row in conn.execute(query.order_by(memories.c.seq))}


def _count_in(conn: Connection, store: MemoryStore) -> int:
    """How many memories `store`'s namespace holds, as the caller's transaction sees it."""
    return conn.execute(select(func.count()).select_from(memories).where(memories.c.namespace == store.path)).scalar_one()


def _promote_rows(
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


def _whole_rows(store: MemoryStore, keys: Sequence[str]) -> Select:
    """The memories `keys` of `store` whole (`WHOLE_ROW`: id, seq, timestamps, the vector), as a SELECT
    for a caller to copy into a table of its own in one `INSERT ... SELECT` (a change's superseded rows)."""
    return select(*(memories.c[c] for c in WHOLE_ROW)).where(
        memories.c.namespace == store.path, memories.c.key.in_(list(keys))
    )


def _restore_rows(conn: Connection, store: MemoryStore, remove: Sequence[str], rows: Select | None = None) -> None:
    """Delete the memories `remove` of `store`, then insert `rows` (a SELECT of `WHOLE_ROW`, e.g. from a
    table `_whole_rows` filled) exactly as they were: ids, positions, timestamps and vectors. No event rows."""
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


def _episode_writes(
    conn: Connection, store: MemoryStore, episode: str, *, newest_first: bool = False
) -> list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]]:
    """The event rows of `store` tagged `episode` as (key, op, before, after), oldest first (or newest)."""
    order = events.c.id.desc() if newest_first else events.c.id
    query = select(events.c.memory_key, events.c.op, events.c.before, events.c.after).where(
        events.c.namespace == store.path, events.c.episode == episode
    )
    return [tuple(row) for row in conn.execute(query.order_by(order))]
