"""A bank's change history: a fork proposed as a change, promoted onto its bank in one transaction,
listed, and undone exactly.

    from memupdate.bank.change_log import propose_change, apply_change, history, undo

    change = propose_change(bank, fork, policy="heuristic", summary={...},
                            details={"replaced": {"k1": {"by": ["m1a2b3c4d"], "reason": "duplicate of k2"}}})
    apply_change(bank, change.id)      # one transaction: the bank now equals the fork; the fork is dropped
    history(bank)                      # [ChangeRecord(id=7, status="applied", ...)]
    undo(bank)                         # the latest applied change undone: the bank as it was before, exactly

Applying writes the bank's own event log (create / update / delete, episode `change:<id>`) and keeps
every row it replaces whole in `superseded_memories` (id, seq, timestamps, embedding) with the keys
that replaced it, the reason and the time. A fork is applied only onto the bank it was forked from
as it was then: a bank written since (by anyone) makes the apply refuse, naming a key, and change
nothing. Undo reads the change's events back to front, checks every row is still what the change
wrote, and restores the superseded rows as they were, embeddings and positions included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Text,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from memupdate.bank.models import MemoryChange, SupersededMemory
from memupdate.store.errors import MemupdateError
from memupdate.store.memory_store import MemoryStore, copy_rows
from memupdate.store.records import MemoryEventRecord, MemoryRecord, NewEvent
from memupdate.store.statements import DROP, RECORD_COLUMNS, events, memories

changes = MemoryChange.__table__
superseded = SupersededMemory.__table__
# Row columns restored by undo exactly as they were.
ROW_COLUMNS = ("id", "key", "content", "kind", "metadata", "embedding", "seq", "created_at", "updated_at")


class ChangeConflict(MemupdateError):
    """A change cannot be applied or undone as asked: the bank moved, or the change is not in that state."""


@dataclass(frozen=True)
class ChangeRecord:
    id: int
    namespace: str
    fork: str | None
    status: str
    policy: str | None
    summary: dict[str, Any]
    details: dict[str, Any]
    created_at: datetime
    applied_at: datetime | None
    undone_at: datetime | None


def propose_change(
    bank: MemoryStore, fork: MemoryStore, *, policy: str | None, summary: dict[str, Any], details: dict[str, Any]
) -> ChangeRecord:
    """Record `fork` as a proposed change of `bank` (nothing in the bank changes)."""
    with bank.engine.begin() as conn:
        row = conn.execute(
            insert(changes)
            .values(namespace=bank.path, fork=fork.path, status="proposed", policy=policy, summary=summary, details=details)
            .returning(*changes.c)
        ).one()
    return _change(row)


def next_change_id(bank: MemoryStore) -> int:
    """A fresh id from the changes' sequence (a compaction names its fork after it before proposing)."""
    with bank.engine.begin() as conn:
        return conn.execute(text("SELECT nextval(pg_get_serial_sequence('memory_changes', 'id'))")).scalar_one()


def propose_change_with_id(
    bank: MemoryStore, change_id: int, fork: MemoryStore, *, policy: str | None, summary: dict[str, Any], details: dict[str, Any]
) -> ChangeRecord:
    """`propose_change` under an id taken with `next_change_id`."""
    with bank.engine.begin() as conn:
        row = conn.execute(
            insert(changes)
            .values(id=change_id, namespace=bank.path, fork=fork.path, status="proposed", policy=policy, summary=summary, details=details)
            .returning(*changes.c)
        ).one()
    return _change(row)


def get_change(bank: MemoryStore, change_id: int) -> ChangeRecord:
    with bank.engine.connect() as conn:
        row = conn.execute(select(changes).where(changes.c.id == change_id, changes.c.namespace == bank.path)).first()
    if row is None:
        raise ChangeConflict(f"bank {bank.path!r} has no change {change_id}: `memupdate history {bank.path}` lists them")
    return _change(row)


def history(bank: MemoryStore) -> list[ChangeRecord]:
    """Every change of the bank, oldest first."""
    with bank.engine.connect() as conn:
        rows = conn.execute(select(changes).where(changes.c.namespace == bank.path).order_by(changes.c.id))
        return [_change(row) for row in rows]


def latest_proposal(bank: MemoryStore) -> ChangeRecord | None:
    """The bank's latest proposed compaction as a whole (the review queue's one-change parts are not)."""
    proposed = [c for c in history(bank) if c.status == "proposed" and "keys" not in c.details]
    return proposed[-1] if proposed else None


def discard_change(bank: MemoryStore, change_id: int, *, note: dict[str, Any] | None = None) -> None:
    """Mark a proposed change discarded and drop its fork (once no other proposed change shares it);
    `note` is merged into its details (e.g. who rejected it and why)."""
    change = get_change(bank, change_id)
    if change.status != "proposed":
        raise ChangeConflict(f"change {change_id} of {bank.path!r} is {change.status}, not proposed: nothing to discard")
    details = {**change.details, **(note or {})}
    with bank.engine.begin() as conn:
        _drop_fork_unless_shared(conn, change)
        conn.execute(update(changes).where(changes.c.id == change_id).values(status="discarded", details=details))


def superseded_rows(bank: MemoryStore, change_id: int | None = None) -> list[dict[str, Any]]:
    """The rows applied changes replaced in the bank (optionally of one change), oldest first."""
    query = select(*(c for c in superseded.c if c.name != "embedding")).where(superseded.c.namespace == bank.path)
    if change_id is not None:
        query = query.where(superseded.c.change_id == change_id)
    with bank.engine.connect() as conn:
        return [dict(row) for row in conn.execute(query.order_by(superseded.c.id)).mappings()]


def change_writes(bank: MemoryStore, change_id: int) -> list[tuple[str, str, dict | None, dict | None]]:
    """What applying the change wrote to the bank, in order: (key, op, before, after) of its events."""
    query = select(events.c.memory_key, events.c.op, events.c.before, events.c.after).where(
        events.c.namespace == bank.path, events.c.episode == f"change:{change_id}"
    )
    with bank.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(query.order_by(events.c.id))]


# -- apply -------------------------------------------------------------------------------------------


def apply_change(bank: MemoryStore, change_id: int, *, before_commit=None) -> ChangeRecord:
    """Promote the change's fork onto the bank in one transaction (see the module docstring).

    `before_commit(conn)` runs last inside the transaction (tests interrupt an apply there)."""
    with bank.engine.begin() as conn:
        _lock(conn, bank)
        change = _change(conn.execute(select(changes).where(changes.c.id == change_id).with_for_update()).one_or_none() or _missing(bank, change_id))
        if change.namespace != bank.path:
            _missing(bank, change_id)
        if change.status != "proposed":
            raise ChangeConflict(f"change {change_id} of {bank.path!r} is {change.status}: only a proposed change can be applied")
        fork = bank.scoped(change.fork)
        part = change.details.get("keys")  # one change of a compaction (the review queue): only its keys
        removed, changed, added = _check_fork_is_current(conn, bank, fork, part)
        bank_rows = _rows(conn, bank.path, removed + changed)
        fork_rows = _rows(conn, fork.path, changed + added)
        counts = _counts(conn, bank.path, fork.path)
        if part is not None:
            counts["memories_after"] = counts["memories_before"] - len(removed) + len(added)
        replaced = change.details.get("replaced", {})
        why = {k: replaced.get(k, {}) for k in removed + changed}
        if why:
            _supersede(conn, bank.path, change_id, why)
        if changed:
            forked = memories.alias("fork_rows")
            conn.execute(
                update(memories)
                .where(memories.c.namespace == bank.path, memories.c.key.in_(changed))
                .where(forked.c.namespace == fork.path, forked.c.key == memories.c.key)
                .values(content=forked.c.content, kind=forked.c.kind, metadata=forked.c.metadata,
                        embedding=forked.c.embedding, updated_at=forked.c.updated_at)
            )
        if removed:
            conn.execute(delete(memories).where(memories.c.namespace == bank.path, memories.c.key.in_(removed)))
        if added:
            conn.execute(copy_rows(fork.path, bank.path, added))
        writer = bank.scoped(bank.namespace, episode=change_episode(change_id))
        writer.append_events(
            [NewEvent("delete", k, _event(bank_rows[k]), None) for k in removed]
            + [NewEvent("update", k, _event(bank_rows[k]), _event(fork_rows[k])) for k in changed]
            + [NewEvent("create", k, None, _event(fork_rows[k])) for k in added],
            connection=conn,
        )
        _drop_fork_unless_shared(conn, change)
        summary = {**change.summary, "applied": {"removed": len(removed), "changed": len(changed), "added": len(added),
                                                  **counts}}
        row = conn.execute(
            update(changes).where(changes.c.id == change_id)
            .values(status="applied", applied_at=func.now(), summary=summary).returning(*changes.c)
        ).one()
        if before_commit is not None:
            before_commit(conn)
    return _change(row)


def _check_fork_is_current(
    conn: Connection, bank: MemoryStore, fork: MemoryStore, part: Sequence[str] | None = None
) -> tuple[list[str], list[str], list[str]]:
    """The bank must be as it was when the fork was made: every key the fork's edits touched holds
    what the fork's first edit of it saw, and every other key is the same on both sides. Returns the
    keys the fork removed, changed and added (compared in SQL, embeddings included). With `part`
    (one change of the fork), only those keys are compared and checked: a write elsewhere in the bank
    does not block it. The rows checked stay locked until the transaction ends, so a concurrent write
    to one of them waits and lands after the apply instead of being overwritten."""
    if conn.execute(select(events.c.id).where(events.c.namespace == fork.path).limit(1)).first() is None:
        raise ChangeConflict(f"the change's fork {fork.path!r} is gone: run the compaction again")
    first_seen: dict[str, dict | None] = {}
    for key, before in conn.execute(
        select(events.c.memory_key, events.c.before)
        .where(events.c.namespace == fork.path, events.c.op.in_(("create", "update", "delete")))
        .order_by(events.c.id)
    ):
        first_seen.setdefault(key, before)
    columns = [memories.c[c] for c in ("key", "content", "kind", "metadata", "embedding")]
    only = [memories.c.key.in_(list(part))] if part is not None else []
    base = select(*columns).where(memories.c.namespace == bindparam("bank"), *only).subquery("b")
    forked = select(*columns).where(memories.c.namespace == bindparam("fork"), *only).subquery("f")
    differs = (base.c.content != forked.c.content) | (base.c.kind != forked.c.kind) | (base.c.metadata != forked.c.metadata) | base.c.embedding.is_distinct_from(forked.c.embedding)
    rows = conn.execute(
        select(base.c.key.label("bank_key"), forked.c.key.label("fork_key"))
        .select_from(base.join(forked, base.c.key == forked.c.key, full=True))
        .where(base.c.key.is_(None) | forked.c.key.is_(None) | differs),
        {"bank": bank.path, "fork": fork.path},
    ).all()
    removed, changed, added = [], [], []
    for bank_key, fork_key in rows:
        key = bank_key or fork_key
        if key not in first_seen:
            raise ChangeConflict(_moved_message(bank, key))
        (added if bank_key is None else removed if fork_key is None else changed).append(key)
    checked = {k: v for k, v in first_seen.items() if part is None or k in part}
    now = _rows(conn, bank.path, list(checked), lock=True)
    for key, seen in checked.items():
        if (_event(now[key]) if key in now else None) != seen:
            raise ChangeConflict(_moved_message(bank, key))
    return removed, changed, added


def _counts(conn: Connection, bank_path: str, fork_path: str) -> dict[str, int]:
    count = select(func.count()).select_from(memories)
    return {
        "memories_before": conn.execute(count.where(memories.c.namespace == bank_path)).scalar_one(),
        "memories_after": conn.execute(count.where(memories.c.namespace == fork_path)).scalar_one(),
    }


def _moved_message(bank: MemoryStore, key: str) -> str:
    return (
        f"bank {bank.path!r} changed since the compaction forked it (memory {key!r} differs): nothing was applied; "
        f"run `memupdate compact {bank.path}` again on the bank as it is now"
    )


def _supersede(conn: Connection, bank_path: str, change_id: int, why: dict[str, dict[str, Any]]) -> None:
    """Copy the replaced rows whole into superseded_memories, with what replaced them and why (one INSERT ... SELECT)."""
    entry = literal(why, JSONB).op("->", return_type=JSONB)(memories.c.key)
    columns = ["change_id", "memory_id", "namespace", "key", "content", "kind", "metadata", "embedding", "seq",
               "created_at", "updated_at", "superseded_by", "reason"]
    source = select(
        literal(change_id), memories.c.id, memories.c.namespace, memories.c.key, memories.c.content, memories.c.kind,
        memories.c.metadata, memories.c.embedding, memories.c.seq, memories.c.created_at, memories.c.updated_at,
        func.coalesce(entry.op("->", return_type=JSONB)("by"), literal([], JSONB)),
        entry.op("->>", return_type=Text)("reason"),
    ).where(memories.c.namespace == bank_path, memories.c.key.in_(list(why)))
    conn.execute(insert(superseded).from_select(columns, source))


# -- undo --------------------------------------------------------------------------------------------


def undo(bank: MemoryStore, to: int | None = None, *, before_commit=None) -> list[ChangeRecord]:
    """Undo the latest applied change, or with `to`, every applied change after change `to` (0: all),
    newest first, in one transaction; returns the undone changes. ChangeConflict if the bank was
    written since in a way the change did not (nothing is undone then)."""
    applied = [c for c in history(bank) if c.status == "applied"]
    if to is not None and to != 0 and to not in {c.id for c in history(bank)}:
        raise ChangeConflict(f"bank {bank.path!r} has no change {to}: `memupdate history {bank.path}` lists them")
    targets = [c for c in applied if c.id > to] if to is not None else applied[-1:]
    if not targets:
        raise ChangeConflict(f"bank {bank.path!r} has no applied change{f' after {to}' if to else ''} to undo")
    undone = []
    with bank.engine.begin() as conn:
        _lock(conn, bank)
        for change in reversed(targets):
            _undo_one(conn, bank, change)
            row = conn.execute(
                update(changes).where(changes.c.id == change.id).values(status="undone", undone_at=func.now()).returning(*changes.c)
            ).one()
            undone.append(_change(row))
        if before_commit is not None:
            before_commit(conn)
    return undone


def undo_change(bank: MemoryStore, change_id: int, *, note: dict[str, Any] | None = None) -> ChangeRecord:
    """Undo one applied change, not necessarily the latest (its rows must still be what it wrote, else
    ChangeConflict and nothing is undone); `note` is merged into its summary (why it was undone)."""
    with bank.engine.begin() as conn:
        _lock(conn, bank)
        row = conn.execute(select(changes).where(changes.c.id == change_id, changes.c.namespace == bank.path).with_for_update()).first()
        change = _change(row) if row is not None else _missing(bank, change_id)
        if change.status != "applied":
            raise ChangeConflict(f"change {change_id} of {bank.path!r} is {change.status}: only an applied change can be undone")
        _undo_one(conn, bank, change)
        row = conn.execute(
            update(changes).where(changes.c.id == change_id)
            .values(status="undone", undone_at=func.now(), summary={**change.summary, **(note or {})}).returning(*changes.c)
        ).one()
    return _change(row)


def _undo_one(conn: Connection, bank: MemoryStore, change: ChangeRecord) -> None:
    logged = conn.execute(
        select(events.c.memory_key, events.c.op, events.c.before, events.c.after)
        .where(events.c.namespace == bank.path, events.c.episode == change_episode(change.id))
        .order_by(events.c.id.desc())
    ).all()
    keys = [e.memory_key for e in logged]
    current = _rows(conn, bank.path, keys, lock=True)
    for key, _op, _before, after in logged:
        now = _event(current[key]) if key in current else None
        if now != after:
            raise ChangeConflict(
                f"memory {key!r} of {bank.path!r} was changed after change {change.id} was applied: nothing was undone; "
                "undo the later changes first (`memupdate history` lists them) or edit it back"
            )
    restore = [k for k, op, _b, _a in logged if op in ("update", "delete")]
    kept = set(
        conn.execute(select(superseded.c.key).where(superseded.c.change_id == change.id, superseded.c.key.in_(restore))).scalars()
    )
    if missing := [k for k in restore if k not in kept]:
        raise ChangeConflict(f"change {change.id} of {bank.path!r} lacks superseded rows for {missing[:5]}: it cannot be undone exactly")
    if keys:
        conn.execute(delete(memories).where(memories.c.namespace == bank.path, memories.c.key.in_(keys)))
    if restore:  # the rows as they were: id, seq, timestamps and the stored vector itself, copied in SQL
        source = (
            select(superseded.c.namespace, superseded.c.memory_id, *(superseded.c[c] for c in ROW_COLUMNS[1:]))
            .where(superseded.c.change_id == change.id, superseded.c.key.in_(restore))
            .order_by(superseded.c.seq)
        )
        conn.execute(insert(memories).from_select(["namespace", *ROW_COLUMNS], source))
    writer = bank.scoped(bank.namespace, episode=undo_episode(change.id))
    entries = []
    for key, op, before, after in logged:
        if op == "create":
            entries.append(NewEvent("delete", key, after, None))
        elif op == "update":
            entries.append(NewEvent("update", key, after, before))
        else:
            entries.append(NewEvent("create", key, None, before))
    writer.append_events(entries, connection=conn)



# -- change episodes and forks -----------------------------------------------------------------------


def change_episode(change_id: int) -> str:
    """The episode of the bank's event rows that applying change `change_id` wrote."""
    return f"change:{change_id}"


def undo_episode(change_id: int) -> str:
    """The episode of the bank's event rows that undoing change `change_id` wrote."""
    return f"undo:{change_id}"


def written_by_a_change(event: MemoryEventRecord) -> bool:
    """Whether a bank's event row was written by applying or undoing a change (not by the app or a tool)."""
    return (event.episode or "").startswith(("change:", "undo:"))


def proposed_forks(bank: MemoryStore) -> set[str]:
    """The forks the bank's proposed changes name (a fork no proposed change names is a leftover)."""
    with bank.engine.connect() as conn:
        query = select(changes.c.fork).where(changes.c.namespace == bank.path, changes.c.status == "proposed")
        return {fork for fork in conn.execute(query).scalars() if fork}


# -- internals -----------------------------------------------------------------------------------------


def _lock(conn: Connection, bank: MemoryStore) -> None:
    # One apply or undo per bank at a time; tool writes to the bank itself are caught by the checks.
    conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(f"memupdate-change:{bank.path}"))))


def _rows(conn: Connection, path: str, keys: Sequence[str], *, lock: bool = False) -> dict[str, Any]:
    """The rows `keys` of namespace `path` (no vectors), by key; with `lock`, locked FOR UPDATE."""
    if not keys:
        return {}
    query = select(*RECORD_COLUMNS).where(memories.c.namespace == path, memories.c.key.in_(list(keys)))
    if lock:
        query = query.with_for_update()
    return {row.key: row for row in conn.execute(query.order_by(memories.c.seq))}


def _event(row: Any) -> dict[str, Any]:
    return MemoryRecord(row.key, (), row.content, row.kind, row.metadata).as_event()


def _drop_fork_unless_shared(conn: Connection, change: ChangeRecord) -> None:
    """Drop the change's fork unless another proposed change (a part of the same compaction) still needs it."""
    others = select(changes.c.id).where(
        changes.c.fork == change.fork, changes.c.status == "proposed", changes.c.id != change.id
    ).limit(1)
    if change.fork and conn.execute(others).first() is None:
        _drop_fork(conn, change.fork)


def _drop_fork(conn: Connection, path: str | None) -> None:
    """The store's own drop statement (memories and events), inside this transaction."""
    if path:
        conn.execute(DROP, {"namespace_path": path})


def _missing(bank: MemoryStore, change_id: int):
    raise ChangeConflict(f"bank {bank.path!r} has no change {change_id}: `memupdate history {bank.path}` lists them")


def change_record(row: Any) -> ChangeRecord:
    """A `memory_changes` row as a ChangeRecord."""
    return _change(row)


def _change(row: Any) -> ChangeRecord:
    return ChangeRecord(
        row.id, row.namespace, row.fork, row.status, row.policy, row.summary, row.details, row.created_at, row.applied_at, row.undone_at
    )
