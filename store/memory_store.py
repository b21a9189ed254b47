"""`MemoryStore`: memories of one namespace in PostgreSQL + pgvector.

    from memupdate.store import MemoryStore

    base = MemoryStore.connect(("locomo", "conv-26"))        # embedded server unless a URL is set
    m = base.create("Caroline moved from Sweden 4 years ago", metadata={"dia_ids": ["D1:3"]})
    base.search("Where did Caroline move from?", top_k=5)     # [ScoredMemory(score=0.71, ...)]

    fork = base.fork(("locomo", "conv-26", "traj", "conv-26-qa0-1a2b3c4d"))   # one INSERT ... SELECT
    fork.update(m.key, content="Caroline moved from Sweden in 2019")
    base.diff(fork)                                           # NamespaceDiff(changed=[m.key])
    fork.drop()

Every write runs in one transaction with its event row (`memory_events`): a failed write leaves
neither. Each sync verb has an async twin with an `a` prefix (`await store.asearch(...)`), run on a
worker thread: the SQL is short and the embedding is CPU-bound, so the event loop stays free.
"""

from __future__ import annotations

import asyncio
import random
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Engine,
    Row,
    Text,
    bindparam,
    cast,
    column,
    delete,
    func,
    insert,
    literal,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError, ProgrammingError

from memupdate.store.database import get_engine
from memupdate.store.embeddings import Embedder, get_embedder
from memupdate.store.errors import (
    DatabaseError,
    EmbeddingDimensionMismatch,
    InvalidMemory,
    InvalidNamespace,
    MemoryNotFound,
)
from memupdate.store.models import MAX_CONTENT_CHARS, MEMORY_KINDS, Memory, MemoryEvent

Namespace = tuple[str, ...]
SampleStrategy = Literal["random", "diverse", "recent"]
SAMPLE_STRATEGIES: tuple[str, ...] = ("random", "diverse", "recent")

# Labels become a `/`-joined path; keep them to characters that need no quoting anywhere (URLs, shells, LIKE).
# Matched with `fullmatch`: `$` alone would accept a label or key ending in a newline.
NAMESPACE_LABEL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,63}")
MAX_NAMESPACE_DEPTH = 8
KEY_PATTERN = re.compile(r"[A-Za-z0-9_.:@+=-]{1,128}")
SEPARATOR = "/"

memories = Memory.__table__
events = MemoryEvent.__table__
# What a read returns: every column but the vector, which callers never need and costs ~20% to parse.
RECORD_COLUMNS = tuple(c for c in memories.c if c.name != "embedding")

# search_by_vector's statement, built once: the top-k sort carries (id, key, distance) instead of
# ~1.7 kB rows, and the k winners are fetched after (bench/store.py: p50 1.96 -> 1.07 ms at 200 memories).
_QUERY_VECTOR = bindparam("query_vector", type_=memories.c.embedding.type)
_DISTANCE = memories.c.embedding.cosine_distance(_QUERY_VECTOR)
_TOP_K = (
    select(memories.c.id, memories.c.key, _DISTANCE.label("distance"))
    .where(memories.c.namespace == bindparam("namespace"), memories.c.embedding.is_not(None))
    .order_by(_DISTANCE, memories.c.key)  # key breaks ties, so equal namespaces rank identically
    .limit(bindparam("top_k"))
    .cte("top_k")
)
SEARCH_BY_VECTOR = (
    select(*RECORD_COLUMNS, _TOP_K.c.distance)
    .join_from(memories, _TOP_K, memories.c.id == _TOP_K.c.id)
    .order_by(_TOP_K.c.distance, _TOP_K.c.key)
)

# search_many_by_vector's statement: the same top-k, once per query vector (a LATERAL join over the
# unnested vectors), so the QA proxy scores all of a fork's questions in one round trip. The vectors
# travel as text that reads back as the very float4s `search_by_vector` sends: the same distances and ranks.
_QUERIES = (
    func.unnest(cast(bindparam("query_vectors", type_=ARRAY(Text)), ARRAY(memories.c.embedding.type)))
    .table_valued(column("query_vector", memories.c.embedding.type), with_ordinality="ordinal")
    .render_derived()
)
_MANY_DISTANCE = memories.c.embedding.cosine_distance(_QUERIES.c.query_vector)
_TOP_K_EACH = (
    select(memories.c.id, memories.c.key, _MANY_DISTANCE.label("distance"))
    .where(memories.c.namespace == bindparam("namespace"), memories.c.embedding.is_not(None))
    .order_by(_MANY_DISTANCE, memories.c.key)
    .limit(bindparam("top_k"))
    .correlate(_QUERIES)
    .lateral("top_k")
)
SEARCH_MANY_BY_VECTOR = (
    select(_QUERIES.c.ordinal, *RECORD_COLUMNS, _TOP_K_EACH.c.distance)
    .select_from(_QUERIES.join(_TOP_K_EACH, true()).join(memories, memories.c.id == _TOP_K_EACH.c.id))
    .order_by(_QUERIES.c.ordinal, _TOP_K_EACH.c.distance, _TOP_K_EACH.c.key)
)

# changes_from's statements: the base's and the fork's rows joined by key, compared in SQL.
_BASE = select(
    memories.c.key, memories.c.content, memories.c.kind, memories.c.metadata, memories.c.embedding,
    memories.c.seq, memories.c.updated_at,
).where(memories.c.namespace == bindparam("base")).subquery("base")  # fmt: skip
_FORK = (
    select(*RECORD_COLUMNS, memories.c.embedding, memories.c.seq)
    .where(memories.c.namespace == bindparam("fork"))
    .subquery("fork")
)
_BY_KEY = _BASE.join(_FORK, _BASE.c.key == _FORK.c.key, full=True)
# What `MemoryRecord.as_event()` compares (jsonb equality is Python's dict equality of the decoded values).
_EDITED = (
    _BASE.c.key.is_(None)
    | _FORK.c.key.is_(None)
    | (_BASE.c.content != _FORK.c.content)
    | (_BASE.c.kind != _FORK.c.kind)
    | (_BASE.c.metadata != _FORK.c.metadata)
)
# A row a search could see differently: edited, or re-embedded.
_REPLACED = _EDITED | _BASE.c.embedding.is_distinct_from(_FORK.c.embedding)
CHANGE_COUNTS = select(
    func.count(_BASE.c.key).label("before"),
    func.count(_FORK.c.key).label("after"),
    func.count().filter(_EDITED).label("edited"),
    func.coalesce(func.array_agg(_BASE.c.key).filter(_BASE.c.key.is_not(None) & _REPLACED), literal([], ARRAY(Text))).label("replaced"),
    func.max(_BASE.c.seq).label("base_seq"),
    func.max(_BASE.c.updated_at).label("base_updated_at"),
).select_from(_BY_KEY)
_WRITTEN = _BASE.c.key.is_(None) | (_BASE.c.content != _FORK.c.content)
_QUERY_DISTANCES = func.array(
    select(_FORK.c.embedding.cosine_distance(_QUERIES.c.query_vector))
    .select_from(_QUERIES)
    .order_by(_QUERIES.c.ordinal)
    .correlate(_FORK)
    .scalar_subquery()
)
CHANGED_ROWS = (
    select(*(_FORK.c[c.name] for c in RECORD_COLUMNS), _WRITTEN.label("written"), _QUERY_DISTANCES.label("distances"))
    .select_from(_FORK.outerjoin(_BASE, _BASE.c.key == _FORK.c.key))
    .where(_REPLACED)
    .order_by(_FORK.c.seq)
)


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


def in_subtree(path: str) -> ColumnElement[bool]:
    """SQL for "the namespace is `path` or below it" (a prefix LIKE the namespace index serves)."""
    pattern = path.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + SEPARATOR + "%"
    return (memories.c.namespace == path) | memories.c.namespace.like(pattern)


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
class NamespaceChanges:
    """How a namespace differs from the one it was forked from, read in SQL (`changes_from`)."""

    memories_before: int
    memories_after: int
    edited: int  # keys added, removed, or with another content, kind or metadata
    written: list[MemoryRecord]  # memories whose text the base does not hold under the same key, in order
    replaced: frozenset[str] = frozenset()  # base keys the fork removed, edited or re-embedded
    # Per query vector given: the fork's new, edited or re-embedded memories as (cosine distance, hit).
    changed_hits: list[list[tuple[float, ScoredMemory]]] = field(default_factory=list)
    base_version: tuple = ()  # (count, max seq, max updated_at) of the base: moves with every write


@dataclass(frozen=True)
class MemoryEventRecord:
    id: int
    op: str
    memory_key: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    episode: str | None
    created_at: datetime


class MemoryStore:
    """The memories of one namespace: CRUD, vector search, sampling, fork, drop, diff and the event log.

    Build one with `MemoryStore.connect(namespace)`; `store.scoped(other_namespace)` shares its engine
    and embedder. `episode` (optional) tags every event row this store writes.
    """

    def __init__(self, engine: Engine, embedder: Embedder, namespace: Namespace | str, *, episode: str | None = None):
        self.engine = engine
        self.embedder = embedder
        self.namespace = to_namespace(namespace)
        self.path = namespace_path(self.namespace)
        self.episode = episode
        self.column_dims = check_schema(engine, embedder)

    @classmethod
    def connect(
        cls,
        namespace: Namespace | str,
        *,
        url: str | None = None,
        embedder: Embedder | None = None,
        episode: str | None = None,
    ) -> MemoryStore:
        """Open `namespace` on the configured database (embedded by default) with the default embedder."""
        return cls(get_engine(url), embedder or get_embedder(), namespace, episode=episode)

    def scoped(self, namespace: Namespace | str, *, episode: str | None = None) -> MemoryStore:
        """The same database and embedder, another namespace."""
        return MemoryStore(self.engine, self.embedder, namespace, episode=episode or self.episode)

    def __repr__(self) -> str:
        return f"MemoryStore({self.path!r})"

    # -- reads -----------------------------------------------------------------------------------

    def get(self, key: str) -> MemoryRecord:
        """The memory `key`; MemoryNotFound if it is not in this namespace."""
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[str]) -> list[MemoryRecord]:
        """The memories `keys`, in that order; MemoryNotFound naming the first key that is missing."""
        with self.engine.connect() as conn:
            return self._fetch(conn, keys)

    def list(self, limit: int | None = None, offset: int = 0) -> list[MemoryRecord]:
        """Memories in insertion order (a fork keeps its base's order), for paging through a namespace."""
        query = (
            select(*RECORD_COLUMNS)
            .where(memories.c.namespace == self.path)
            .order_by(memories.c.seq)
            .offset(offset)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [self._record(row) for row in conn.execute(query)]

    def count(self) -> int:
        with self.engine.connect() as conn:
            return conn.execute(
                select(func.count()).select_from(memories).where(memories.c.namespace == self.path)
            ).scalar_one()

    def search(self, query: str, top_k: int = 5) -> list[ScoredMemory]:
        """The `top_k` memories closest to `query` by cosine similarity, best first (exact scan)."""
        return self.search_by_vector(self.embedder.embed([query])[0], top_k)

    def search_by_vector(self, vector: np.ndarray | Sequence[float], top_k: int = 5) -> list[ScoredMemory]:
        """Like `search`, with a query vector embedded already (the QA proxy embeds questions once)."""
        if top_k < 1:
            raise InvalidMemory(f"top_k={top_k} must be at least 1")
        params = {"query_vector": np.asarray(vector, dtype=np.float32), "namespace": self.path, "top_k": top_k}
        with self.engine.connect() as conn:
            rows = conn.execute(SEARCH_BY_VECTOR, params)
            return [ScoredMemory(self._record(row), 1.0 - float(row.distance)) for row in rows]

    def search_many_by_vector(
        self, vectors: Sequence[np.ndarray | Sequence[float]], top_k: int = 5
    ) -> list[list[ScoredMemory]]:
        """`search_by_vector` for each vector, the same hits in the same order, in one statement."""
        return [[hit for _, hit in ranked] for ranked in self.ranked_many_by_vector(vectors, top_k)]

    def ranked_many_by_vector(
        self, vectors: Sequence[np.ndarray | Sequence[float]], top_k: int = 5
    ) -> list[list[tuple[float, ScoredMemory]]]:
        """`search_many_by_vector` with each hit's cosine distance, the ranking key (with the memory's
        key breaking ties): what merging a fork's changes into its base's hits sorts by."""
        if top_k < 1:
            raise InvalidMemory(f"top_k={top_k} must be at least 1")
        if len(vectors) == 0:
            return []
        params = {"query_vectors": [_vector_text(v) for v in vectors], "namespace": self.path, "top_k": top_k}
        hits: list[list[tuple[float, ScoredMemory]]] = [[] for _ in vectors]
        with self.engine.connect() as conn:
            for row in conn.execute(SEARCH_MANY_BY_VECTOR, params):
                distance = float(row.distance)
                hits[row.ordinal - 1].append((distance, ScoredMemory(self._record(row), 1.0 - distance)))
        return hits

    def sample(self, strategy: SampleStrategy = "random", k: int = 5, *, seed: int | None = None) -> list[MemoryRecord]:
        """`k` memories: `random` (seedable), `diverse` (farthest-point over embeddings) or `recent`
        (latest session date, then latest update)."""
        if strategy not in SAMPLE_STRATEGIES:
            raise InvalidMemory(f"sample strategy {strategy!r} is not one of {', '.join(SAMPLE_STRATEGIES)}")
        if k < 1:
            raise InvalidMemory(f"k={k} must be at least 1")
        where = memories.c.namespace == self.path
        with self.engine.connect() as conn:
            if strategy == "recent":
                date = memories.c.metadata["date"].astext
                rows = conn.execute(
                    select(*RECORD_COLUMNS)
                    .where(where)
                    .order_by(date.desc().nulls_last(), memories.c.updated_at.desc(), memories.c.key)
                    .limit(k)
                )
                return [self._record(row) for row in rows]
            # vector_send: pgvector's binary form, ~10x cheaper to read than the text form of 200 vectors.
            vectors = func.vector_send(memories.c.embedding).label("vector")
            columns = (*RECORD_COLUMNS, vectors) if strategy == "diverse" else RECORD_COLUMNS
            rows = conn.execute(select(*columns).where(where).order_by(memories.c.key)).all()
        rng = random.Random(seed)
        if strategy == "random" or len(rows) <= k:
            picked = rng.sample(range(len(rows)), min(k, len(rows)))
        else:
            matrix = np.stack([_from_vector_send(row.vector, self.column_dims) for row in rows])
            picked = _farthest_points(matrix, k, rng.randrange(len(rows)))
        return [self._record(rows[i]) for i in picked]

    def snapshot(self) -> dict[str, MemoryRecord]:
        """All memories of the namespace by key."""
        return {record.key: record for record in self.list()}

    def diff(self, other: MemoryStore | Namespace | str) -> NamespaceDiff:
        """What changed going from this namespace to `other` (e.g. base -> edited fork), by key."""
        other_store = other if isinstance(other, MemoryStore) else self.scoped(other)
        before, after = self.snapshot(), other_store.snapshot()
        changed = [key for key in before.keys() & after.keys() if before[key].as_event() != after[key].as_event()]
        return NamespaceDiff(
            added=sorted(after.keys() - before.keys()),
            removed=sorted(before.keys() - after.keys()),
            changed=sorted(changed),
        )

    def changes_from(
        self, base: MemoryStore | Namespace | str, query_vectors: Sequence[np.ndarray] | None = None
    ) -> NamespaceChanges:
        """Counts and written memories of this namespace against `base`, compared in SQL: what the
        reward needs of a fork, without reading either namespace whole. With `query_vectors`, also
        the distance of every new, edited or re-embedded memory to each of them (`changed_hits`), so
        a search of the fork is the base's hits minus `replaced` plus those."""
        base_path = base.path if isinstance(base, MemoryStore) else namespace_path(to_namespace(base))
        vectors = list(query_vectors) if query_vectors is not None else []
        params = {"base": base_path, "fork": self.path, "query_vectors": [_vector_text(v) for v in vectors]}
        with self.engine.connect() as conn:
            counts = conn.execute(CHANGE_COUNTS, params).one()
            changed = conn.execute(CHANGED_ROWS, params).all()
        written, hits = [], [[] for _ in vectors]
        for row in changed:
            record = self._record(row)
            if row.written:
                written.append(record)
            for i, distance in enumerate(row.distances or []):
                if distance is not None:  # no embedding: no search finds it
                    hits[i].append((float(distance), ScoredMemory(record, 1.0 - float(distance))))
        return NamespaceChanges(
            counts.before, counts.after, counts.edited, written, frozenset(counts.replaced), hits,
            (counts.before, counts.base_seq, counts.base_updated_at),
        )  # fmt: skip

    def events(self) -> list[MemoryEventRecord]:
        """The event log of this namespace, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(events).where(events.c.namespace == self.path).order_by(events.c.id))
            return [
                MemoryEventRecord(r.id, r.op, r.memory_key, r.before, r.after, r.episode, r.created_at) for r in rows
            ]

    def deleted_keys(self) -> set[str]:
        """Keys an edit removed from this namespace (a delete event, a merge's or split's sources included)
        and that it does not hold now; a `drop(keep_events=True)` starts the record afresh."""
        with self.engine.connect() as conn:
            last_drop = conn.execute(
                select(func.max(events.c.id)).where(events.c.namespace == self.path, events.c.op == "drop")
            ).scalar()
            query = select(events.c.memory_key).distinct().where(
                events.c.namespace == self.path, events.c.op == "delete", events.c.id > (last_drop or 0)
            )
            removed = set(conn.execute(query).scalars())
            if not removed:
                return removed
            present = conn.execute(
                select(memories.c.key).where(memories.c.namespace == self.path, memories.c.key.in_(removed))
            ).scalars()
            return removed - set(present)

    def list_namespaces(
        self, prefix: Namespace | Sequence[str] | None = None, *, with_counts: bool = False
    ) -> list[Namespace] | dict[Namespace, int]:
        """Namespaces in the whole database (optionally under `prefix`), sorted; with memory counts if asked."""
        query = select(memories.c.namespace, func.count()).group_by(memories.c.namespace).order_by(memories.c.namespace)
        if prefix:
            path = namespace_path(to_namespace(prefix))
            query = query.where(in_subtree(path))
        with self.engine.connect() as conn:
            counts = {tuple(row[0].split(SEPARATOR)): row[1] for row in conn.execute(query)}
        return counts if with_counts else list(counts)

    # -- writes ----------------------------------------------------------------------------------

    def create(
        self, content: str, *, kind: str = "semantic", metadata: dict[str, Any] | None = None, key: str | None = None
    ) -> MemoryRecord:
        """Add one memory (embedded now); `key` defaults to a fresh UUID."""
        return self.create_many([NewMemory(content, kind, metadata or {}, key)])[0]

    def create_many(self, items: Sequence[NewMemory], *, skip_existing: bool = False) -> list[MemoryRecord]:
        """Add memories in one transaction with one batched embedding call (ingestion uses this).

        With `skip_existing`, items whose key the namespace already holds (even one another process
        commits meanwhile) are left out instead of failing; only the created ones are returned and logged.
        """
        return self.replace([], items, skip_existing=skip_existing)

    def update(
        self,
        key: str,
        *,
        content: str | None = None,
        kind: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> MemoryRecord:
        """Change a memory's content (re-embedded), kind or metadata (replaced whole when given)."""
        if content is not None:
            _check_content(content)
        if kind is not None:
            _check_kind(kind)
        if metadata is not None:
            _check_metadata(metadata)
        vector = self.embedder.embed([content])[0] if content is not None else None
        with self.engine.begin() as conn:
            before = self._fetch(conn, [key], lock=True)[0]
            values: dict[str, Any] = {"updated_at": func.clock_timestamp()}
            if content is not None:
                values |= {"content": content, "embedding": vector}
            if kind is not None:
                values["kind"] = kind
            if metadata is not None:
                values["metadata"] = metadata
            row = conn.execute(
                update(memories)
                .where(memories.c.namespace == self.path, memories.c.key == key)
                .values(**values)
                .returning(*RECORD_COLUMNS)
            ).one()
            after = self._record(row)
            self._log(conn, [("update", key, before.as_event(), after.as_event())])
        return after

    def delete(self, key: str) -> MemoryRecord:
        """Remove a memory; returns what was removed."""
        return self.replace([key], [])[0]

    def replace(
        self, delete_keys: Sequence[str], items: Sequence[NewMemory], *, skip_existing: bool = False
    ) -> list[MemoryRecord]:
        """Delete `delete_keys` and add `items` in one transaction (merge and split are this).

        Returns the created memories, or the deleted ones when nothing is created. `skip_existing`: see
        `create_many`.
        """
        for item in items:
            _check_content(item.content)
            _check_kind(item.kind)
            _check_metadata(item.metadata)
            if item.key is not None and not KEY_PATTERN.fullmatch(item.key):
                raise InvalidMemory(f"memory key {item.key!r} must be 1-128 letters, digits or _ . : @ + = -")
        if len(set(delete_keys)) != len(delete_keys):
            raise InvalidMemory(f"memory ids {list(delete_keys)!r} name the same memory twice")
        vectors = self.embedder.embed([item.content for item in items]) if items else []
        with self.engine.begin() as conn:
            removed = self._fetch(conn, delete_keys, lock=True) if delete_keys else []
            if delete_keys:
                conn.execute(delete(memories).where(memories.c.namespace == self.path, memories.c.key.in_(delete_keys)))
            created: list[MemoryRecord] = []
            if items:
                rows = [
                    {
                        "namespace": self.path,
                        "key": item.key or str(uuid.uuid4()),
                        "content": item.content,
                        "kind": item.kind,
                        "metadata": item.metadata,
                        "embedding": vector,
                    }
                    for item, vector in zip(items, vectors, strict=True)
                ]
                try:
                    if skip_existing:  # one statement: ON CONFLICT waits for a concurrent insert of the key, then skips
                        result = conn.execute(
                            pg_insert(memories)
                            .values(rows)
                            .on_conflict_do_nothing(index_elements=[memories.c.namespace, memories.c.key])
                            .returning(*RECORD_COLUMNS)
                        )
                    else:
                        result = conn.execute(insert(memories).returning(*RECORD_COLUMNS, sort_by_parameter_order=True), rows)
                except IntegrityError as exc:
                    raise InvalidMemory(
                        f"a memory with one of the keys {[r['key'] for r in rows][:5]} already exists in {self.path!r}: "
                        "update it, or create without a key"
                    ) from exc
                created = [self._record(row) for row in result]
            self._log(
                conn,
                [("delete", r.key, r.as_event(), None) for r in removed]
                + [("create", r.key, None, r.as_event()) for r in created],
            )
        return created or removed

    def fork(self, target: Namespace | str, *, episode: str | None = None) -> MemoryStore:
        """Copy every memory, embeddings included, into the empty namespace `target` with one
        `INSERT ... SELECT`; keys are kept so the fork can be diffed against this namespace."""
        fork = self.scoped(target, episode=episode)
        if fork.path == self.path:
            raise InvalidNamespace(f"cannot fork namespace {self.path!r} onto itself: name a new namespace")
        columns = ["namespace", "key", "content", "kind", "metadata", "embedding", "created_at", "updated_at"]
        source = select(
            literal(fork.path),
            memories.c.key,
            memories.c.content,
            memories.c.kind,
            memories.c.metadata,
            memories.c.embedding,
            memories.c.created_at,
            memories.c.updated_at,
        ).where(memories.c.namespace == self.path).order_by(memories.c.seq)
        with self.engine.begin() as conn:
            if conn.execute(select(memories.c.id).where(memories.c.namespace == fork.path).limit(1)).first():
                raise InvalidNamespace(f"namespace {fork.path!r} already has memories: drop it or fork to a new name")
            copied = len(conn.execute(insert(memories).from_select(columns, source).returning(memories.c.id)).all())
            fork._log(conn, [("fork", None, None, {"source": self.path, "memories": copied})])
        return fork

    @contextmanager
    def forked(
        self, target: Namespace | str, *, episode: str | None = None, keep: bool = False, keep_failed: bool = False
    ) -> Iterator[MemoryStore]:
        """`fork` into `target` for the block, then drop the fork (`drop_fork`), however the block ends.

            with base.forked(("locomo", "conv-26", "try-1")) as fork:
                fork.create("Caroline moved from Sweden in 2019")
                reward = compute_reward(base, fork, questions)
            # the fork is gone, also after an error, Ctrl-C or asyncio cancellation

        `keep` keeps it when the block finishes, `keep_failed` when it raises an error, for inspection;
        an interrupt (KeyboardInterrupt, asyncio.CancelledError) always drops it. A `target` that cannot
        be forked (taken, or this namespace) raises InvalidNamespace and is left as it is.
        """
        fork = self.scoped(target, episode=episode)
        try:
            self.fork(fork.namespace, episode=episode)
        except InvalidNamespace:
            raise  # nothing was forked: what holds that name is not ours to drop
        except BaseException:
            drop_fork(fork)  # an interrupt just after the fork committed
            raise
        try:
            yield fork
        except BaseException as exc:
            if not (keep_failed and isinstance(exc, Exception)):
                drop_fork(fork)
            raise
        if not keep:
            drop_fork(fork)

    def drop(self, *, keep_events: bool = False) -> int:
        """Delete every memory of the namespace (and its event log unless `keep_events`); returns how many."""
        with self.engine.begin() as conn:
            removed = conn.execute(delete(memories).where(memories.c.namespace == self.path)).rowcount
            if keep_events:
                self._log(conn, [("drop", None, None, {"memories": removed})])
            else:
                conn.execute(delete(events).where(events.c.namespace == self.path))
        return removed

    # -- internals -------------------------------------------------------------------------------

    def _record(self, row: Row) -> MemoryRecord:
        return MemoryRecord(
            key=row.key,
            namespace=tuple(row.namespace.split(SEPARATOR)),
            content=row.content,
            kind=row.kind,
            metadata=row.metadata,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    def _fetch(self, conn, keys: Sequence[str], *, lock: bool = False) -> list[MemoryRecord]:  # noqa: ANN001
        """The rows `keys` in that order (locked for this transaction if asked); MemoryNotFound if any is missing."""
        for key in keys:
            if "\x00" in key:  # PostgreSQL text cannot hold NUL, so no stored key does (and the query would fail)
                raise MemoryNotFound(key, self.path)
        query = select(*RECORD_COLUMNS).where(memories.c.namespace == self.path, memories.c.key.in_(keys))
        found = {row.key: self._record(row) for row in conn.execute(query.with_for_update() if lock else query)}
        for key in keys:
            if key not in found:
                raise MemoryNotFound(key, self.path)
        return [found[key] for key in keys]

    def _log(self, conn, entries: Iterable[tuple[str, str | None, dict | None, dict | None]]) -> None:  # noqa: ANN001
        rows = [
            {"namespace": self.path, "memory_key": key, "op": op, "before": before, "after": after, "episode": self.episode}
            for op, key, before, after in entries
        ]
        if rows:
            conn.execute(insert(events), rows)


def drop_fork(fork: MemoryStore) -> int:
    """Drop a fork (its memories and events), once more on a fresh connection if the first try fails: an
    interrupt can break the connection the episode was using, and a fork must not outlive its run. The
    one way memupdate drops a fork (`MemoryStore.forked`, verl's rollouts, `memupdate db forks --prune`)."""
    try:
        return fork.drop()
    except Exception:
        fork.engine.dispose()
        return fork.drop()


def check_schema(engine: Engine, embedder: Embedder) -> int:
    """The vector column's size, after checking the schema is migrated and `embedder` fits the column
    (the database is queried once per process)."""
    url = str(engine.url)
    if url not in _column_dims:
        try:
            with engine.connect() as conn:
                _column_dims[url] = conn.execute(
                    text("SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname = 'embedding'")
                ).scalar_one()
        except ProgrammingError:
            raise DatabaseError(
                f"database {engine.url.render_as_string(hide_password=True)} has no memupdate schema: "
                "run `memupdate db upgrade`"
            ) from None
    if embedder.dims != _column_dims[url]:
        raise _dims_error(embedder, _column_dims[url])
    return _column_dims[url]


# Engine URL -> size of the memories.embedding column, read once per process.
_column_dims: dict[str, int] = {}


def _dims_error(embedder: Embedder, column_dims: int) -> EmbeddingDimensionMismatch:
    return EmbeddingDimensionMismatch(
        f"embedding model {embedder.name!r} makes {embedder.dims}-dim vectors but the memories.embedding column "
        f"holds {column_dims}: set MEMUPDATE_EMBEDDING_MODEL to a {column_dims}-dim model, or use a fresh "
        f"database with MEMUPDATE_EMBEDDING_DIMS={embedder.dims} and run `memupdate db upgrade`"
    )


def holds_nul(value: Any) -> bool:
    """Whether a string, or any key or string inside a JSON value, holds NUL, which PostgreSQL's text and
    jsonb cannot store."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(holds_nul(v) for v in value)
    return False


def _check_content(content: str) -> None:
    if not isinstance(content, str) or not content.strip():
        raise InvalidMemory("memory content is empty: give the text to remember")
    if holds_nul(content):
        raise InvalidMemory("memory content holds a NUL character (\\x00), which PostgreSQL cannot store: remove it")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidMemory(
            f"memory content has {len(content)} characters, over the limit of {MAX_CONTENT_CHARS}: split it"
        )


def _check_metadata(metadata: dict[str, Any]) -> None:
    if holds_nul(metadata):
        raise InvalidMemory("memory metadata holds a NUL character (\\x00), which PostgreSQL cannot store: remove it")


def _check_kind(kind: str) -> None:
    if kind not in MEMORY_KINDS:
        raise InvalidMemory(f"memory kind {kind!r} is not one of {', '.join(MEMORY_KINDS)}")


@lru_cache(maxsize=4096)
def _vector_text_of(data: bytes) -> str:
    # numpy prints a float32 as the shortest text that reads back as the same float32 (pgvector reads
    # it with strtof): half the bytes of pgvector's own float64 text, the same vector on the server.
    return "[" + ",".join(map(str, np.frombuffer(data, dtype=np.float32))) + "]"


def _vector_text(vector: np.ndarray | Sequence[float]) -> str:
    """pgvector's text form of `vector`, cached: the QA proxy sends the same question vectors for a
    base and all its forks."""
    return _vector_text_of(np.asarray(vector, dtype=np.float32).tobytes())


def _from_vector_send(data: bytes | None, dims: int) -> np.ndarray:
    """Decode pgvector's binary form (int16 dims, int16 unused, then big-endian float4s)."""
    if data is None:
        return np.zeros(dims, dtype=np.float32)
    return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)


def _farthest_points(matrix: np.ndarray, k: int, start: int) -> list[int]:
    """Greedy farthest-point sampling in cosine distance: each pick is the memory least like those picked."""
    picked = [start]
    nearest = 1.0 - matrix @ matrix[start]
    while len(picked) < k:
        nearest[picked] = -np.inf
        index = int(np.argmax(nearest))
        picked.append(index)
        nearest = np.minimum(nearest, 1.0 - matrix @ matrix[index])
    return picked


def _make_async(name: str):  # noqa: ANN202
    sync = getattr(MemoryStore, name)

    async def method(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(sync, self, *args, **kwargs)

    method.__name__ = method.__qualname__ = f"a{name}"
    method.__doc__ = f"Async twin of `{name}` (runs on a worker thread)."
    return method


for _name in (
    "get", "get_many", "list", "count", "search", "search_by_vector", "search_many_by_vector", "ranked_many_by_vector",
    "sample", "snapshot", "diff", "changes_from", "events", "deleted_keys",
    "list_namespaces", "create", "create_many", "update", "delete", "replace", "fork", "drop",
):  # fmt: skip
    setattr(MemoryStore, f"a{_name}", _make_async(_name))
