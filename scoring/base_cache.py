"""What the reward computes from a base namespace, kept while the base's version holds.

    from memupdate.scoring.base_cache import base_cache
    snapshot, = base_cache.lookup(base, changes.base_version, [("snapshot",)], lambda missing: [base.snapshot()])

GRPO scores n rollouts of every row against one base, so the base's hits, QA scores and snapshot are
worth keeping between rewards. An episode never writes its base, but a worker can outlive a reload of
it: every entry is keyed on the database, the base's namespace and what was computed, and holds the
base's version it was computed at ((count, max seq, max updated_at), which `changes_from` reads with
every reward and which moves with every write). Another version is a miss, and the entry is computed again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from cachetools import LRUCache

from memupdate.store import MemoryStore


class BaseCache:
    """A bounded LRU of values computed from a base, each valid for one version of that base. Safe across
    threads (verl's reward workers score on several): the lock guards the entries, not the computing."""

    def __init__(self, max_entries: int = 8192) -> None:
        self.max_entries = max_entries
        self._entries: LRUCache[tuple, tuple[tuple, Any]] = LRUCache(max_entries)
        self._lock = threading.Lock()

    def lookup(
        self,
        base: MemoryStore,
        version: tuple,
        keys: Sequence[Hashable],
        compute: Callable[[list[int]], Sequence[Any]],
    ) -> list[Any]:
        """The value of each key for `base` at `version`; `compute(positions)` returns, in one call, the
        values of the keys at those positions that are missing or were computed at another version."""
        where = (str(base.engine.url), base.path)
        full_keys = [(*where, key) for key in keys]
        values: list[Any] = [None] * len(keys)
        missing = []
        with self._lock:
            for i, key in enumerate(full_keys):
                entry = self._entries.get(key)  # a read marks it recently used
                if entry is not None and entry[0] == version:
                    values[i] = entry[1]
                else:
                    missing.append(i)
        if missing:
            computed = list(compute(missing))
            with self._lock:
                for i, value in zip(missing, computed, strict=True):
                    values[i] = value
                    self._entries[full_keys[i]] = (version, value)  # the least recently used go
        return values

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# The process's one cache of base values: the QA proxy's base hits, the reward's base scores and snapshot.
base_cache = BaseCache()
