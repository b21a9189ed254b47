"""What superseded what: for each supersession of a change (a stale memory kept as history, retired by a
newer statement of the same fact), both memories' texts and when each was stated, as `memupdate history`
and `memupdate review` show them.

    from memupdate.bank.supersessions import supersessions
    supersessions(bank, review_change, fork=change.fork, change_id=change.id)    # review_change: a Change
    # [Supersession(stale=StatedMemory("k1", "Alice's favourite colour is blue", "2024-03-01 09:00:00"),
    #               newer=StatedMemory("k2", "Alice's favourite colour is now green", "2024-06-02 18:30:00"))]

A review that keeps the newer memories as they were when the change was proposed (`newer`, each with
when it was stated) is read as it is; for a review without them they are looked up: in the bank, then
the change's fork, then the rows a change superseded.
"""

from __future__ import annotations

from memupdate.bank.review_records import Change, ReviewedMemory, StatedMemory, Supersession
from memupdate.store import MemoryNotFound, MemoryRecord, MemoryStore
from memupdate.text.facts import shown_time


def stated_time(memory: MemoryRecord) -> str | None:
    """When the memory's statement was made (to the second where known, else the day); for a memory that
    says nothing of it, when it was written here."""
    shown = shown_time(memory)
    if shown is None and memory.created_at is not None:
        return f"{memory.created_at:%Y-%m-%d %H:%M:%S}"
    return shown


def described(memory: MemoryRecord) -> StatedMemory:
    """A memory as a supersession shows it: key, text and when it was stated."""
    return StatedMemory(memory.key, memory.content, stated_time(memory))


def supersessions(bank: MemoryStore, change: Change, *, fork: str | None = None, change_id: int | None = None) -> list[Supersession]:
    """The supersessions of one review change: the stale memory and the newer one, each described."""
    named = change.coverage.superseded_by or {}
    # A change stored before the review kept when a statement was made has no `stated_at`: look it up.
    kept = {m.key: m for m in change.newer or () if m.stated_at is not None}
    sources = {m.key: m for m in change.sources if m.stated_at is not None}
    return [Supersession(_shown(sources.get(stale)) or _look_up(bank, stale, fork, change_id),
                         _shown(kept.get(newer)) or _look_up(bank, newer, fork, None))
            for stale, newer in named.items()]


def _shown(memory: ReviewedMemory | None) -> StatedMemory | None:
    return StatedMemory(memory.key, memory.content, memory.stated_at) if memory else None


def _look_up(bank: MemoryStore, key: str, fork: str | None, change_id: int | None) -> StatedMemory:
    from memupdate.bank.change_log import superseded_rows

    for where in [bank, *([bank.scoped(fork)] if fork else [])]:
        try:
            return described(where.get(key))
        except MemoryNotFound:
            continue
    rows = [r for r in superseded_rows(bank, change_id) if r["key"] == key]
    if rows:  # the row as the change that retired it kept it
        row = rows[-1]
        return described(MemoryRecord(key, bank.namespace, row["content"], row.get("kind") or "semantic",
                                      row.get("metadata") or {}, row.get("created_at")))
    return StatedMemory(key, None, None)
