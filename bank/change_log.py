"""A bank's change history: a fork proposed as a change, promoted onto its bank in one transaction,
listed, and undone exactly.

    from memupdate.bank.change_log import propose_change, apply_change, history, undo

    change = propose_change(bank, fork, policy="heuristic", summary={"kinds": {"merge": 1}},
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

from sqlalchemy import Connection, Select, Text, func, insert, literal, select, text, update
from sqlalchemy.dialects.postgresql import JSONB

from memupdate.bank.models import MemoryChange, SupersededMemory
from memupdate.bank.review_records import Change
from memupdate.errors import MemupdateError
from memupdate.store import (
    WHOLE_ROW,
    MemoryEventRecord,
    MemoryStore,
    PromotionConflict,
    drop_in,
    promote_fork,
    undo_promotion,
)

changes = MemoryChange.__table__
superseded = SupersededMemory.__table__
# A superseded row's copy of the memory, column for column with the store's `WHOLE_ROW`.
_SUPERSEDED_ROW = ("namespace", "memory_id", *WHOLE_ROW[2:])


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

    @property
    def part_keys(self) -> list[str] | None:
        """For a part of the review queue (one change of a compaction, `bank.review_queue`), the memories it
        applies; None for a whole compaction or any other change."""
        return self.details.get("keys")

    @property
    def review_change(self) -> Change | None:
        """A part's change of the review (None for a whole compaction: its review is `details["review"]`)."""
        stored = self.details.get("review_change")
        return Change.from_json(stored) if stored else None


def propose_change(
    bank: MemoryStore, fork: MemoryStore, *, policy: str | None, summary: dict[str, Any], details: dict[str, Any],
    change_id: int | None = None,
) -> ChangeRecord:
    """Record `fork` as a proposed change of `bank` (nothing in the bank changes); under `change_id` when
    one was taken with `next_change_id` (a compaction names its fork after it), else the next id."""
    values = {"namespace": bank.path, "fork": fork.path, "status": "proposed", "policy": policy, "summary": summary,
              "details": details}
    if change_id is not None:
        values["id"] = change_id
    with bank.engine.begin() as conn:
        row = conn.execute(insert(changes).values(**values).returning(*changes.c)).one()
    return _change(row)


def next_change_id(bank: MemoryStore) -> int:
    """A fresh id from the changes' sequence (a compaction names its fork after it before proposing)."""
    with bank.engine.begin() as conn:
        return conn.execute(text("SELECT nextval(pg_get_serial_sequence('memory_changes', 'id'))")).scalar_one()


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


def banks_with_proposed(engine, paths: Sequence[str]) -> set[str]:
    """Of the banks `paths`, those with a proposed change, in one query (a watcher's pass looks for safe
    changes a killed pass left only there)."""
    if not paths:
        return set()
    with engine.connect() as conn:
        query = select(changes.c.namespace).distinct().where(changes.c.namespace.in_(list(paths)), changes.c.status == "proposed")
        return set(conn.execute(query).scalars())


def latest_proposal(bank: MemoryStore) -> ChangeRecord | None:
    """The bank's latest proposed compaction as a whole (the review queue's one-change parts are not)."""
    proposed = [c for c in history(bank) if c.status == "proposed" and c.part_keys is None]
    return proposed[-1] if proposed else None


def discard_change(bank: MemoryStore, change_id: int, *, note: dict[str, Any] | None = None) -> None:
    """Mark a proposed change discarded and drop its fork (once no other proposed change shares it);
    `note` is merged into its details (e.g. who rejected it and why)."""
    change = get_change(bank, change_id)
    if change.status != "proposed":
        raise ChangeConflict(f"change {change_id} of {bank.path!r} is {change.status}, not proposed: nothing to discard")
    details = {**change.details, **(note or {})}
    with bank.engine.begin() as conn:
        _drop_fork_unless_shared(conn, bank, change)
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
    return [(e.memory_key, e.op, e.before, e.after) for e in bank.events(episode=change_episode(change_id))]


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
        part = change.part_keys  # one change of a compaction (the review queue): only its keys
        replaced = change.details.get("replaced", {})
        try:
            done = promote_fork(
                conn, bank, fork, episode=change_episode(change_id), keys=part,
                keep_replaced=lambda keys, rows: _supersede(conn, change_id, {k: replaced.get(k, {}) for k in keys}, rows),
            )
        except PromotionConflict as conflict:
            raise ChangeConflict(
                _moved_message(bank, conflict.key) if conflict.key
                else f"the change's fork {fork.path!r} is gone: run the compaction again"
            ) from None
        _drop_fork_unless_shared(conn, bank, change)
        summary = {**change.summary, "applied": {"removed": len(done.removed), "changed": len(done.changed),
                                                  "added": len(done.added), "memories_before": done.memories_before,
                                                  "memories_after": done.memories_after}}
        row = conn.execute(
            update(changes).where(changes.c.id == change_id)
            .values(status="applied", applied_at=func.now(), summary=summary).returning(*changes.c)
        ).one()
        if before_commit is not None:
            before_commit(conn)
    return _change(row)


def _moved_message(bank: MemoryStore, key: str) -> str:
    return (
        f"bank {bank.path!r} changed since the compaction forked it (memory {key!r} differs): nothing was applied; "
        f"run `memupdate compact {bank.path}` again on the bank as it is now"
    )


def _supersede(conn: Connection, change_id: int, why: dict[str, dict[str, Any]], replaced: Select) -> None:
    """Copy the replaced rows (the store's SELECT of them whole) into superseded_memories, with what
    replaced them and why (one INSERT ... SELECT)."""
    rows = replaced.subquery("replaced")
    entry = literal(why, JSONB).op("->", return_type=JSONB)(rows.c.key)
    columns = ["change_id", *_SUPERSEDED_ROW, "superseded_by", "reason"]
    source = select(
        literal(change_id), *(rows.c[c] for c in WHOLE_ROW),
        func.coalesce(entry.op("->", return_type=JSONB)("by"), literal([], JSONB)),
        entry.op("->>", return_type=Text)("reason"),
    )
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
    def rows_before(restore: list[str]) -> Select:
        kept = set(
            conn.execute(select(superseded.c.key).where(superseded.c.change_id == change.id, superseded.c.key.in_(restore))).scalars()
        )
        if missing := [k for k in restore if k not in kept]:
            raise ChangeConflict(f"change {change.id} of {bank.path!r} lacks superseded rows for {missing[:5]}: it cannot be undone exactly")
        # The rows as they were: id, seq, timestamps and the stored vector itself, copied in SQL.
        return (
            select(*(superseded.c[c] for c in _SUPERSEDED_ROW))
            .where(superseded.c.change_id == change.id, superseded.c.key.in_(restore))
            .order_by(superseded.c.seq)
        )

    try:
        undo_promotion(conn, bank, change_episode(change.id), as_episode=undo_episode(change.id), rows_before=rows_before)
    except PromotionConflict as conflict:
        deleted = conflict.found is None and conflict.expected is not None
        raise ChangeConflict(_moved_since(bank, change, conflict.key, conflict.expected, deleted=deleted)) from None


def _moved_since(bank: MemoryStore, change: ChangeRecord, key: str, after: dict | None, *, deleted: bool) -> str:
    """Why a change cannot be undone, in the words of whoever holds the memory: the app's own key for a
    bank kept in step with a LangGraph store, what happened to it (deleted or rewritten) and by whom."""
    from memupdate.bank.source_kinds import source_kind
    from memupdate.bank.sources import read_source, store_key

    last = next((e for e in reversed(bank.events()) if e.memory_key == key and e.op in ("create", "update", "delete")), None)
    by_change = last.episode if last is not None and written_by_a_change(last) else None
    what = "deleted" if deleted else "rewritten"
    undone = f"nothing was undone; `memupdate history {bank.path} --change {change.id}` shows its texts"
    if by_change:  # a later change of memupdate's own: undoing that one first makes this one undoable
        later = by_change.split(":", 1)[1]
        verb = "undoing" if by_change.startswith("undo:") else "change"
        return (f"memory {key!r} of {bank.path!r} was {what} by {verb} {later} after change {change.id} was applied: "
                f"{undone}; undo change {later} first")
    record = read_source(bank)
    if record is not None and source_kind(record["kind"]).live:
        mapped = {state["key"]: source_key for source_key, state in record["items"].items()}
        app_key = (change.summary.get("app_keys") or {}).get(key) or mapped.get(key) \
            or store_key(bank.path, key, (after or {}).get("metadata"))
        return (f"the app {'deleted' if deleted else 'rewrote'} its item {app_key!r} (memory {key!r} of {bank.path!r}) after change {change.id} "
                f"was applied: {undone}; {'the deletion' if deleted else 'its write'} stays, as the app made it")
    fix = "recreate it from those texts if you want it back" if deleted else "edit it back first"
    return f"memory {key!r} of {bank.path!r} was {what} after change {change.id} was applied (not by a change): {undone}; {fix}"


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


def _drop_fork_unless_shared(conn: Connection, bank: MemoryStore, change: ChangeRecord) -> None:
    """Drop the change's fork unless another proposed change (a part of the same compaction) still needs it."""
    others = select(changes.c.id).where(
        changes.c.fork == change.fork, changes.c.status == "proposed", changes.c.id != change.id
    ).limit(1)
    if change.fork and conn.execute(others).first() is None:
        drop_in(conn, bank.scoped(change.fork))


def _missing(bank: MemoryStore, change_id: int):
    raise ChangeConflict(f"bank {bank.path!r} has no change {change_id}: `memupdate history {bank.path}` lists them")


def change_record(row: Any) -> ChangeRecord:
    """A `memory_changes` row as a ChangeRecord."""
    return _change(row)


def _change(row: Any) -> ChangeRecord:
    return ChangeRecord(
        row.id, row.namespace, row.fork, row.status, row.policy, row.summary, row.details, row.created_at, row.applied_at, row.undone_at
    )
