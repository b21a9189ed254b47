"""Shared by the reliability tests: random tool calls, and replaying a namespace's event log."""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy import text

from memupdate.store import MemoryStore
from memupdate.store.memory_store import SAMPLE_STRATEGIES

SQL_LOOKING = ["'; DROP TABLE memories; --", "\" OR 1=1 --", "$$ SELECT pg_sleep(10) $$", "%_\\", "f0001' --"]


def replay(base: dict[str, dict[str, Any]], events: list) -> dict[str, dict[str, Any]]:
    """The memories a namespace must hold: `base` (key -> as_event()) with its events applied in order."""
    state = dict(base)
    for event in events:
        if event.op in ("create", "update"):
            state[event.memory_key] = event.after
        elif event.op == "delete":
            assert state.pop(event.memory_key) == event.before, f"delete of {event.memory_key} logged the wrong before"
    return state


def as_events(store: MemoryStore) -> dict[str, dict[str, Any]]:
    return {key: record.as_event() for key, record in store.snapshot().items()}


def vector_sizes(store: MemoryStore) -> set[int | None]:
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT vector_dims(embedding) FROM memories WHERE namespace = :ns"), {"ns": store.path})
        return set(rows.scalars())


def random_call(rng: random.Random, keys: list[str], foreign: list[str]) -> tuple[str, dict[str, Any]]:
    """One tool call: mostly sensible, sometimes a foreign or unknown handle, SQL-looking or odd text."""

    def handle() -> str:
        roll = rng.random()
        if roll < 0.8 and keys:
            return rng.choice(keys)
        if roll < 0.9 and foreign:
            return rng.choice(foreign)
        return "m" + "".join(rng.choice("0123456789abcdef") for _ in range(8))

    def words() -> str:
        if rng.random() < 0.15:
            return rng.choice(SQL_LOOKING)
        return " ".join(rng.choice(["Caroline", "ran", "a", "marathon", "in", "May", "2023", "Melanie", "painted", "é", "猫"])
                        for _ in range(rng.randint(1, 12)))

    name = rng.choice(["search_memory", "search_memory", "sample_memory", "manage_memory", "manage_memory",
                       "delete_memory", "merge_memory", "split_memory"])
    if name == "search_memory":
        return name, {"query": words(), "top_k": rng.randint(1, 8)}
    if name == "sample_memory":
        return name, {"strategy": rng.choice(SAMPLE_STRATEGIES), "k": rng.randint(1, 6)}
    if name == "manage_memory":
        if rng.random() < 0.5:
            return name, {"action": "create", "content": words()}
        return name, {"action": "update", "memory_id": handle(), "content": words()}
    if name == "delete_memory":
        return name, {"memory_id": handle()}
    if name == "merge_memory":
        return name, {"memory_ids": [handle() for _ in range(rng.randint(2, 3))], "strategy": "concatenate"}
    return name, {"memory_id": handle(), "parts": [words(), words()]}


def run_random_agent(
    store: MemoryStore | str, namespace: tuple[str, ...], episode: str, operations: int, seed: int, foreign: list[str]
) -> dict[str, int]:
    """`operations` random tool calls on `namespace` (`store` or, in another process, a database URL).
    Returns counts; a call on a foreign handle must fail."""
    from memupdate.agent.tools import run_tool

    if isinstance(store, str):  # a process of its own: one torch thread each, or 16 processes thrash 2 cores
        import torch

        torch.set_num_threads(1)
        store = MemoryStore.connect(namespace, url=store, episode=episode)
    bank = store.scoped(namespace, episode=episode)
    rng = random.Random(seed)
    keys = list(bank.snapshot())
    counts = {"ok": 0, "failed": 0, "foreign_ok": 0}
    for step in range(operations):
        name, args = random_call(rng, keys, foreign)
        result = run_tool(bank, name, args)
        counts["ok" if result.ok else "failed"] += 1
        named = set(args.get("memory_ids", [])) | {args.get("memory_id")}
        counts["foreign_ok"] += result.ok and bool(named & set(foreign))
        if name in ("manage_memory", "merge_memory", "split_memory", "delete_memory") or step % 10 == 0:
            keys = list(bank.snapshot())
    return counts
