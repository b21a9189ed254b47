"""Apply, history and undo of a bank's changes: one transaction, superseded rows kept whole, undo exact."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text

from memupdate.agent.tools import run_tool
from memupdate.bank.change_log import (
    ChangeConflict,
    apply_change,
    history,
    propose_change,
    superseded_rows,
    undo,
)
from memupdate.store import MemoryStore
from memupdate.store.statements import memories

FACTS = [
    "Alice moved to Lisbon in 2021",
    "Alice moved to Lisbon in 2021.",
    "Alice has a dog called Rex",
    "Alice went hiking yesterday",
    "Alice works as a nurse at the city hospital",
]


def bank_rows(bank: MemoryStore) -> list[tuple]:
    """Everything a row is, the vector as PostgreSQL prints it (so equal means the same float4s)."""
    with bank.engine.connect() as conn:
        rows = conn.execute(
            select(memories.c.id, memories.c.key, memories.c.content, memories.c.kind, memories.c.metadata,
                   text("embedding::text"),
                   memories.c.seq, memories.c.created_at, memories.c.updated_at)
            .where(memories.c.namespace == bank.path).order_by(memories.c.seq)
        ).all()
    return [tuple(row) for row in rows]


def edited_fork(bank: MemoryStore, label: str = "f1") -> MemoryStore:
    fork = bank.fork((*bank.namespace, "compaction", label))
    keys = [m.key for m in bank.list()]
    assert run_tool(fork, "merge_memory", {"memory_ids": keys[:2], "content": FACTS[0]}).ok
    assert run_tool(fork, "manage_memory", {"action": "update", "memory_id": keys[3], "content": "Alice went hiking on 7 May 2023"}).ok
    assert run_tool(fork, "delete_memory", {"memory_id": keys[2]}).ok
    return fork


def test_apply_supersedes_and_undo_restores_exactly(store: MemoryStore) -> None:
    bank = store.scoped((*store.namespace, "bank"))
    bank.create_many([__import__("memupdate.store", fromlist=["NewMemory"]).NewMemory(f, metadata={"date": "2023-05-08"}) for f in FACTS])
    before = bank_rows(bank)
    fork = edited_fork(bank)
    keys = [m.key for m in bank.list()]
    change = propose_change(
        bank, fork, policy="test", summary={},
        details={"replaced": {keys[0]: {"by": ["mX"], "reason": "duplicates"}, keys[2]: {"reason": "not needed"}}},
    )
    assert history(bank)[-1].status == "proposed" and bank_rows(bank) == before

    applied = apply_change(bank, change.id)
    assert applied.status == "applied" and applied.summary["applied"] == {
        "removed": 3, "changed": 1, "added": 1, "memories_before": 5, "memories_after": 3,
    }
    assert sorted(m.content for m in bank.list()) == sorted([FACTS[0], "Alice went hiking on 7 May 2023", FACTS[4]])
    assert fork.count() == 0 and not fork.events()  # the fork is promoted, then dropped
    kept = {row["key"]: row for row in superseded_rows(bank, change.id)}
    assert set(kept) == {keys[0], keys[1], keys[2], keys[3]}
    assert kept[keys[0]]["superseded_by"] == ["mX"] and kept[keys[0]]["reason"] == "duplicates"
    assert kept[keys[2]]["reason"] == "not needed" and kept[keys[3]]["content"] == FACTS[3]
    ops = [(e.op, e.episode) for e in bank.events()[-5:]]
    assert all(episode == f"change:{change.id}" for _, episode in ops)

    (undone,) = undo(bank)
    assert undone.id == change.id and undone.status == "undone"
    assert bank_rows(bank) == before  # ids, seq, timestamps, vectors: exactly as before the apply
    with pytest.raises(ChangeConflict, match="no applied change"):
        undo(bank)


def test_stale_fork_and_interrupted_apply_change_nothing(store: MemoryStore) -> None:
    from memupdate.store import NewMemory

    bank = store.scoped((*store.namespace, "bank"))
    bank.create_many([NewMemory(f) for f in FACTS])
    fork = edited_fork(bank)
    change = propose_change(bank, fork, policy="test", summary={}, details={})
    before = bank_rows(bank)

    def interrupt(conn):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        apply_change(bank, change.id, before_commit=interrupt)
    assert bank_rows(bank) == before and fork.count() == 3 and history(bank)[-1].status == "proposed"
    assert superseded_rows(bank) == []

    bank.create("Alice learned Portuguese")  # the bank moves while the proposal waits
    with pytest.raises(ChangeConflict, match="changed since the compaction forked it"):
        apply_change(bank, change.id)
    assert history(bank)[-1].status == "proposed" and bank.count() == 6


def test_undo_to_a_change_and_refusal_after_a_later_edit(store: MemoryStore) -> None:
    from memupdate.store import NewMemory

    bank = store.scoped((*store.namespace, "bank"))
    bank.create_many([NewMemory(f) for f in FACTS])
    start = bank_rows(bank)
    first = apply_change(bank, propose_change(bank, edited_fork(bank, "a"), policy="t", summary={}, details={}).id)
    after_first = bank_rows(bank)
    fork = bank.fork((*bank.namespace, "compaction", "b"))
    run_tool(fork, "delete_memory", {"memory_id": bank.list()[0].key})
    second = apply_change(bank, propose_change(bank, fork, policy="t", summary={}, details={}).id)
    assert [c.status for c in history(bank)] == ["applied", "applied"]

    undone = undo(bank, to=first.id)
    assert [c.id for c in undone] == [second.id] and bank_rows(bank) == after_first
    edited = bank.list()[0]
    bank.update(edited.key, content="Alice moved to Porto in 2022")
    with pytest.raises(ChangeConflict, match="was rewritten after change"):
        undo(bank, to=0)
    bank.update(edited.key, content=edited.content)  # edit it back: the undo can run
    undo(bank, to=0)
    assert [(r[1], r[2]) for r in bank_rows(bank)] == [(r[1], r[2]) for r in start]
