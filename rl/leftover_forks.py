"""Trajectory forks left in the database by crashed runs or kept episodes: list them, prune them.

    from datetime import timedelta
    from memupdate.rl.leftover_forks import list_forks, prune_forks, namespace_summary

    list_forks(store)                                   # every ".../traj/..." namespace, its base, age
    prune_forks(store, older_than=timedelta(hours=6))   # drop the inactive ones (memories and events)
    namespace_summary(engine)                           # {"bases": 2, "base_memories": 334, "forks": 1, ...}

`memupdate db forks` and `memupdate db status` show these; `memupdate rl train` prunes its bases'
leftovers at start-up. The SQL is the store's (`memupdate.store.inventory`); the layout that tells a
fork from a base is `memupdate.rl.data.namespaces`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from memupdate.rl.data.namespaces import TRAJ_LABEL, fork_base
from memupdate.store import (
    SEPARATOR,
    MemoryStore,
    drop_fork,
    memory_counts,
    namespace_path,
    namespaces_labelled,
    to_namespace,
)


@dataclass(frozen=True)
class ForkInfo:
    """A trajectory namespace still in the database: its base, size, and when it was last written."""

    namespace: str
    base: str
    memories: int
    events: int
    created_at: datetime | None  # its first event (the fork), else its oldest row
    last_write: datetime | None  # its newest event or row change

    def age(self, now: datetime | None = None) -> timedelta:
        """Time since the fork was last written (a live rollout writes every few seconds)."""
        now = now or datetime.now(UTC)
        return now - self.last_write if self.last_write else timedelta(0)


def list_forks(store: MemoryStore, prefix: Sequence[str] | str | None = None) -> list[ForkInfo]:
    """Every trajectory namespace (optionally under `prefix`), with memories or only events, oldest write first."""
    under = namespace_path(to_namespace(prefix)) if prefix else None
    forks = []
    for found in namespaces_labelled(store.engine, TRAJ_LABEL, under):
        base = fork_base(found.namespace.split(SEPARATOR))
        if base is not None:
            forks.append(
                ForkInfo(found.namespace, namespace_path(base), found.memories, found.events, found.created_at, found.last_write)
            )
    return forks


def prune_forks(
    store: MemoryStore, older_than: timedelta = timedelta(0), prefix: Sequence[str] | str | None = None
) -> list[ForkInfo]:
    """Drop (memories and events) every trajectory namespace not written for `older_than`; returns them."""
    now = datetime.now(UTC)
    pruned = [f for f in list_forks(store, prefix) if f.age(now) >= older_than]
    for fork in pruned:
        drop_fork(store.scoped(fork.namespace))
    return pruned


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `6h`, `2d` (or a plain number of seconds) as a timedelta; ValueError naming the format."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    value = text.strip().lower()
    try:
        if value and value[-1] in units:
            seconds = float(value[:-1]) * units[value[-1]]
        else:
            seconds = float(value)
    except ValueError:
        seconds = -1
    if not seconds >= 0:
        raise ValueError(f"duration {text!r} is not like 90s, 30m, 6h or 2d")
    return timedelta(seconds=seconds)


def namespace_summary(engine: Engine) -> dict[str, int]:
    """Namespaces and memories split into bases and trajectory forks (for `memupdate db status`)."""
    summary = {"bases": 0, "base_memories": 0, "forks": 0, "fork_memories": 0}
    for namespace, count in memory_counts(engine).items():
        kind = "base" if fork_base(namespace.split(SEPARATOR)) is None else "fork"
        summary[f"{kind}s"] += 1
        summary[f"{kind}_memories"] += count
    return summary
