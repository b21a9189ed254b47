"""What superseded what: for each supersession of a change (a stale memory kept as history, retired by a
newer statement of the same fact), both memories' texts and when each was stated, as `memupdate history`
and `memupdate review` show them.

    from memupdate.bank.supersessions import supersessions
    supersessions(bank, review_change, fork=change.fork, change_id=change.id)
    # [{"stale": {"key": "k1", "content": "Alice's favourite colour is blue", "stated_at": "2024-03-01 09:00:00"},
    #   "newer": {"key": "k2", "content": "Alice's favourite colour is now green", "stated_at": "2024-06-02 18:30:00"}}]

A review that keeps the newer memories as they were when the change was proposed (`newer`) is read as
it is; for a review without them they are looked up: in the bank, then the change's fork, then the rows
a change superseded.
"""

from __future__ import annotations

from typing import Any

from memupdate.store import MemoryNotFound, MemoryRecord, MemoryStore
from memupdate.text.facts import shown_time


def stated_time(memory: MemoryRecord) -> str | None:
    """When the memory's statement was made (to the second where known, else the day); for a memory that
    says nothing of it, when it was written here."""
    shown = shown_time(memory)
    if shown is None and memory.created_at is not None:
        return f"{memory.created_at:%Y-%m-%d %H:%M:%S}"
    return shown


def described(memory: MemoryRecord) -> dict[str, Any]:
    """A memory as a supersession shows it: key, text and when it was stated."""
    return {"key": memory.key, "content": memory.content, "stated_at": stated_time(memory)}


def supersessions(
    bank: MemoryStore, change: dict[str, Any], *, fork: str | None = None, change_id: int | None = None
) -> list[dict[str, Any]]:
    """The supersessions of one review change (`build_review`'s shape): {stale, newer}, each described."""
    named = (change.get("coverage") or {}).get("superseded_by") or {}
    kept = {m["key"]: m for m in change.get("newer") or [] if "stated_at" in m}
    sources = {m["key"]: m for m in change.get("sources") or [] if "stated_at" in m}
    pairs = []
    for stale, newer in named.items():
        pairs.append({
            "stale": _shown(sources.get(stale)) or _look_up(bank, stale, fork, change_id),
            "newer": _shown(kept.get(newer)) or _look_up(bank, newer, fork, None),
        })
    return pairs


def _shown(memory: dict[str, Any] | None) -> dict[str, Any] | None:
    return {k: memory[k] for k in ("key", "content", "stated_at")} if memory else None


def _look_up(bank: MemoryStore, key: str, fork: str | None, change_id: int | None) -> dict[str, Any]:
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
    return {"key": key, "content": None, "stated_at": None}
