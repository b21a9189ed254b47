"""The values the store takes and returns, and namespace names: plain dataclasses, no SQL.

    from memupdate.store import MemoryRecord, NewMemory, to_namespace
    to_namespace("locomo/conv-26")            # ('locomo', 'conv-26'), or InvalidNamespace naming the label
    NewMemory("Caroline moved from Sweden", metadata={"dia_ids": ["D1:3"]})
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from memupdate.store.errors import InvalidNamespace

Namespace = tuple[str, ...]

# Labels become a `/`-joined path; keep them to characters that need no quoting anywhere (URLs, shells, LIKE).
# Matched with `fullmatch`: `$` alone would accept a label or key ending in a newline.
NAMESPACE_LABEL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,63}")
MAX_NAMESPACE_DEPTH = 8
KEY_PATTERN = re.compile(r"[A-Za-z0-9_.:@+=-]{1,128}")
SEPARATOR = "/"


def to_namespace(namespace: Namespace | Sequence[str] | str) -> Namespace:
    """Validate a namespace given as a tuple or as `a/b/c`; raise InvalidNamespace naming the bad label."""
    labels = tuple(namespace.split(SEPARATOR)) if isinstance(namespace, str) else tuple(namespace)
    if not labels or len(labels) > MAX_NAMESPACE_DEPTH:
        raise InvalidNamespace(
            f"namespace {labels!r} must have 1 to {MAX_NAMESPACE_DEPTH} labels, e.g. ('locomo', 'conv-26')"
        )
    for label in labels:
        if not isinstance(label, str) or not NAMESPACE_LABEL.fullmatch(label):
            raise InvalidNamespace(
                f"namespace label {label!r} in {labels!r} is not allowed: use 1-64 characters from "
                "letters, digits and _ . : @ + = - (no '/', spaces or leading '-')"
            )
    return labels


def namespace_path(namespace: Namespace) -> str:
    return SEPARATOR.join(namespace)


@dataclass(frozen=True)
class MemoryRecord:
    """One memory as callers see it; `key` is its id within the namespace (kept across forks)."""

    key: str
    namespace: Namespace
    content: str
    kind: str = "semantic"
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def as_event(self) -> dict[str, Any]:
        return {"key": self.key, "content": self.content, "kind": self.kind, "metadata": self.metadata}


@dataclass(frozen=True)
class ScoredMemory:
    """A search hit: the memory and its cosine similarity to the query (1 = same direction)."""

    memory: MemoryRecord
    score: float


@dataclass(frozen=True)
class NewMemory:
    """A memory to write: the argument of `create_many` and `replace`."""

    content: str
    kind: str = "semantic"
    metadata: dict[str, Any] = field(default_factory=dict)
    key: str | None = None


@dataclass(frozen=True)
class NamespaceDiff:
    """Keys added, removed and changed (content, kind or metadata) going from one namespace to another."""

    added: list[str]
    removed: list[str]
    changed: list[str]

    @property
    def is_empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


@dataclass(frozen=True)
class MemoryEventRecord:
    id: int
    op: str
    memory_key: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    episode: str | None
    created_at: datetime



@dataclass(frozen=True)
class NewEvent:
    """An event row to append to a namespace's log (`MemoryStore.append_events`): a write another layer
    made in its own transaction (a change applied or undone), or a marker (`memupdate watch`'s `compacted`)."""

    op: str
    memory_key: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


class NamespaceVersion(NamedTuple):
    """(count, max seq, max updated_at) of a namespace's rows: moves with every insert, delete and update."""

    count: int
    max_seq: int | None
    max_updated_at: datetime | None
