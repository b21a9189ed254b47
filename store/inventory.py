"""What the database holds across namespaces: memories per namespace, and the namespaces with a given
label in their path, with their size and first and last writes (how leftover forks are found).

    from memupdate.store.inventory import memory_counts, namespaces_labelled

    memory_counts(engine)             # {"locomo/conv-26": 167, "locomo/conv-26/traj/conv-26-qa3-1a2b3c4d": 168}
    namespaces_labelled(engine, TRAJ_LABEL, under="locomo/conv-26")   # a label the caller defines
    # [NamespaceActivity(namespace="locomo/conv-26/traj/conv-26-qa3-1a2b3c4d", memories=168, events=3, ...)]
    namespace_exists(engine, "locomo/conv-62")   # False: no memories or events were ever there
    since_last(engine, ["imported/memories/ana", ...], mark="compacted", op="create")   # many banks in 3 queries
    # {"imported/memories/ana": SinceLast(mark=MemoryEventRecord(...), events=[...], memories=20), ...}
    latest_marks(engine, ["imported/memories/ana", ...], "judged")   # {"imported/memories/ana": MemoryEventRecord(...)}
    nearest_namespaces(engine, "locomo/conv-62", fork_labels)  # ["locomo/conv-26", ...]: what a mistyped name meant

They take an engine, not a store: `memupdate db status` counts without loading the embedding model.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, func, select

from memupdate.store.records import SEPARATOR, MemoryEventRecord
from memupdate.store.statements import events, memories


@dataclass(frozen=True)
class NamespaceActivity:
    """A namespace with memories or only events left: how many of each, and when it was written."""

    namespace: str
    memories: int
    events: int
    created_at: datetime | None  # its first event (a fork's fork event), else its oldest row
    last_write: datetime | None  # its newest event or row change


def memory_counts(engine: Engine) -> dict[str, int]:
    """Memories per namespace path, for every namespace that holds any."""
    with engine.connect() as conn:
        return dict(conn.execute(select(memories.c.namespace, func.count()).group_by(memories.c.namespace)).all())


def namespace_exists(engine: Engine, path: str) -> bool:
    """Whether `path` holds memories or ever did: a row or an event of its own (a bank also counts its
    changes: `bank.namespaces.bank_exists`)."""
    with engine.connect() as conn:
        return any(
            conn.execute(select(table.c.namespace).where(table.c.namespace == path).limit(1)).first() is not None
            for table in (memories, events)
        )


def nearest_namespaces(engine: Engine, path: str, fork_labels: Iterable[str] = (), n: int = 3) -> list[str]:
    """The namespaces holding memories whose paths are closest to `path` (else the largest ones), for a
    message about a mistyped name; forks (a namespace with one of `fork_labels` in its path) are left out."""
    fork_labels = set(fork_labels)
    counts = {
        namespace: count for namespace, count in memory_counts(engine).items()
        if not fork_labels & set(namespace.split(SEPARATOR))
    }
    close = difflib.get_close_matches(path, list(counts), n=n, cutoff=0.6)
    return close or sorted(counts, key=lambda namespace: (-counts[namespace], namespace))[:n]


def namespaces_labelled(engine: Engine, label: str, under: str | None = None) -> list[NamespaceActivity]:
    """Every namespace with `label` between two of its labels (optionally at or below the path `under`),
    with memories or only events, oldest write first."""
    pattern = f"%{SEPARATOR}{_like_literal(label)}{SEPARATOR}%"
    found: dict[str, dict] = {}
    with engine.connect() as conn:
        for table, newest in ((memories, func.max(func.greatest(memories.c.created_at, memories.c.updated_at))),
                              (events, func.max(events.c.created_at))):
            query = (
                select(table.c.namespace, func.count(), func.min(table.c.created_at), newest)
                .where(table.c.namespace.like(pattern))
                .group_by(table.c.namespace)
            )
            for namespace, count, first, last in conn.execute(query):
                if under and not (namespace == under or namespace.startswith(under + SEPARATOR)):
                    continue
                entry = found.setdefault(namespace, {"memories": 0, "events": 0, "first": {}, "last": []})
                entry["memories" if table is memories else "events"] = count
                entry["first"][table.name] = first
                entry["last"].append(last)
    activity = [
        NamespaceActivity(
            namespace,
            entry["memories"],
            entry["events"],
            # The fork event dates a fork; copied rows keep their base's created_at, so they only stand in.
            entry["first"].get(events.name) or entry["first"].get(memories.name),
            max((d for d in entry["last"] if d is not None), default=None),
        )
        for namespace, entry in found.items()
    ]
    return sorted(activity, key=lambda a: (a.last_write or datetime.min.replace(tzinfo=UTC), a.namespace))


def _like_literal(text: str) -> str:
    """`text` matched as it is by LIKE (its `%`, `_` and `\\` escaped)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@dataclass(frozen=True)
class SinceLast:
    """A namespace's latest `mark` event (None: never marked), its `op` events after it (only when
    marked), and how many memories it holds."""

    mark: MemoryEventRecord | None
    events: list[MemoryEventRecord]
    memories: int


def since_last(engine: Engine, paths: Sequence[str], *, mark: str, op: str) -> dict[str, SinceLast]:
    """For each namespace of `paths`, what `SinceLast` holds, in three queries whatever their number (a
    watcher's pass over many banks asks each what happened since it last compacted it)."""
    paths = list(dict.fromkeys(paths))
    if not paths:
        return {}
    with engine.connect() as conn:
        last = _last_marks(paths, mark)
        marks = {row.namespace: _event(row) for row in conn.execute(select(events).join(last, events.c.id == last.c.id))}
        after: dict[str, list[MemoryEventRecord]] = {path: [] for path in marks}
        query = (select(events).join(last, events.c.namespace == last.c.namespace)
                 .where(events.c.op == op, events.c.id > last.c.id).order_by(events.c.id))
        for row in conn.execute(query):
            after[row.namespace].append(_event(row))
        counts = dict(conn.execute(select(memories.c.namespace, func.count()).where(memories.c.namespace.in_(paths))
                                   .group_by(memories.c.namespace)).all())
    return {path: SinceLast(marks.get(path), after.get(path, []), counts.get(path, 0)) for path in paths}


def latest_marks(engine: Engine, paths: Sequence[str], mark: str) -> dict[str, MemoryEventRecord]:
    """Each namespace of `paths`' latest `mark` event (none where it has none), in one query."""
    paths = list(dict.fromkeys(paths))
    if not paths:
        return {}
    with engine.connect() as conn:
        last = _last_marks(paths, mark)
        return {row.namespace: _event(row) for row in conn.execute(select(events).join(last, events.c.id == last.c.id))}


def _last_marks(paths: Sequence[str], mark: str):
    """The id of each namespace's latest `mark` event, as a subquery (namespace, id)."""
    return (select(events.c.namespace, func.max(events.c.id).label("id"))
            .where(events.c.namespace.in_(paths), events.c.op == mark).group_by(events.c.namespace).subquery())


def _event(row) -> MemoryEventRecord:
    return MemoryEventRecord(row.id, row.op, row.memory_key, row.before, row.after, row.episode, row.created_at)
