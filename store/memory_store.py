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
neither. Most writes (create one, update, delete, merge and split (`replace`), fork, drop) are ONE
statement that writes its event row too (a data-modifying CTE, `statements.py`), run in autocommit
mode: one round trip, no BEGIN or COMMIT; reads are one autocommit round trip too, and no connection
is pinged before use (a dead pooled connection is retried once, `database.retrying`). The rest of the
store sits beside this file: the values it takes and returns (`records.py`),
its tables and prebuilt statements (`statements.py`), row and vector codecs (`codecs.py`), the checks
before a write (`validation.py`), the fork-vs-base comparison in SQL (`fork_diff.py`), and a fork
promoted onto its base and a promotion undone, each one operation inside a caller's transaction
(`promotion.py`, what a change's apply and undo use).
Async callers use LangGraph's adapter (`langgraph_store.py`) or `asyncio.to_thread`.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Literal, TypeVar, get_args

import numpy as np
from sqlalchemy import (
    ARRAY,
    Connection,
    Engine,
    Insert,
    Text,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError

from memupdate.store.codecs import from_vector_send, record_of, vector_text
from memupdate.store.database import get_engine, retrying
from memupdate.store.embeddings import Embedder, get_embedder
from memupdate.store.errors import InvalidMemory, InvalidNamespace, MemoryNotFound
from memupdate.store.records import (
    KEY_PATTERN,
    SEPARATOR,
    MemoryEventRecord,
    MemoryRecord,
    Namespace,
    NamespaceDiff,
    NamespaceVersion,
    NewEvent,
    NewMemory,
    ScoredMemory,
    namespace_path,
    to_namespace,
)
from memupdate.store.statements import (
    CREATE_LOGGED,
    DELETE_LOGGED,
    DELETE_ONE_LOGGED,
    DROP,
    DROP_KEEPING_EVENTS,
    FETCH_ONE,
    FORK_LOGGED,
    RECORD_COLUMNS,
    REPLACE_LOGGED,
    SEARCH_BY_VECTOR,
    SEARCH_MANY_BY_VECTOR,
    UPDATE_LOGGED,
    VERSION,
    events,
    in_subtree,
    memories,
)
from memupdate.store.validation import check_content, check_kind, check_metadata, check_schema

SampleStrategy = Literal["random", "diverse", "recent"]
SAMPLE_STRATEGIES: tuple[str, ...] = get_args(SampleStrategy)
T = TypeVar("T")


# `create_many(skip_existing=True)`'s statement: a row whose key the namespace holds is left out.
INSERT_NEW = (pg_insert(memories).on_conflict_do_nothing(index_elements=[memories.c.namespace, memories.c.key])
              .returning(*RECORD_COLUMNS))


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
        self._check_keys([key])
        params = {"namespace_path": self.path, "memory_key": key}
        row = self._autocommitted(lambda conn: conn.execute(FETCH_ONE, params).first())
        if row is None:
            raise MemoryNotFound(key, self.path)
        return record_of(row)

    def get_many(self, keys: Sequence[str]) -> list[MemoryRecord]:
        """The memories `keys`, in that order; MemoryNotFound naming the first key that is missing."""
        return self._autocommitted(lambda conn: self._fetch(conn, keys))

    def list(self, limit: int | None = None, offset: int = 0) -> list[MemoryRecord]:
        """Memories in insertion order (a fork keeps its base's order), for paging through a namespace."""
        query = (
            select(*RECORD_COLUMNS)
            .where(memories.c.namespace == self.path)
            .order_by(memories.c.seq)
            .offset(offset)
            .limit(limit)
        )
        return self._autocommitted(lambda conn: [record_of(row) for row in conn.execute(query)])

    def count(self) -> int:
        query = select(func.count()).select_from(memories).where(memories.c.namespace == self.path)
        return self._autocommitted(lambda conn: conn.execute(query).scalar_one())

    def search(self, query: str, top_k: int = 5) -> list[ScoredMemory]:
        """The `top_k` memories closest to `query` by cosine similarity, best first (exact scan)."""
        return self.search_by_vector(self.embedder.embed([query])[0], top_k)

    def search_by_vector(self, vector: np.ndarray | Sequence[float], top_k: int = 5) -> list[ScoredMemory]:
        """Like `search`, with a query vector embedded already (the QA proxy embeds questions once)."""
        if top_k < 1:
            raise InvalidMemory(f"top_k={top_k} must be at least 1")
        params = {"query_vector": np.asarray(vector, dtype=np.float32), "namespace": self.path, "top_k": top_k}
        rows = self._autocommitted(lambda conn: conn.execute(SEARCH_BY_VECTOR, params).all())
        return [ScoredMemory(record_of(row), 1.0 - float(row.distance)) for row in rows]

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
        params = {"query_vectors": [vector_text(v) for v in vectors], "namespace": self.path, "top_k": top_k}
        hits: list[list[tuple[float, ScoredMemory]]] = [[] for _ in vectors]
        for row in self._autocommitted(lambda conn: conn.execute(SEARCH_MANY_BY_VECTOR, params).all()):
            distance = float(row.distance)
            hits[row.ordinal - 1].append((distance, ScoredMemory(record_of(row), 1.0 - distance)))
        return hits

    def sample(self, strategy: SampleStrategy = "random", k: int = 5, *, seed: int | None = None) -> list[MemoryRecord]:
        """`k` memories: `random` (seedable), `diverse` (farthest-point over embeddings) or `recent`
        (latest session date, then latest update)."""
        if strategy not in SAMPLE_STRATEGIES:
            raise InvalidMemory(f"sample strategy {strategy!r} is not one of {', '.join(SAMPLE_STRATEGIES)}")
        if k < 1:
            raise InvalidMemory(f"k={k} must be at least 1")
        where = memories.c.namespace == self.path
        # One snapshot for both reads below: the picked keys are all there when their rows are read.
        with self.engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn:
            if strategy == "recent":
                date = memories.c.metadata["date"].astext
                rows = conn.execute(
                    select(*RECORD_COLUMNS)
                    .where(where)
                    .order_by(date.desc().nulls_last(), memories.c.updated_at.desc(), memories.c.key)
                    .limit(k)
                )
                return [record_of(row) for row in rows]
            # Keys (and vectors) of every memory, then the k picked rows whole: decoding every row's
            # text, metadata and times cost more than the second read.
            # vector_send: pgvector's binary form, far cheaper to read than the text form of many vectors.
            vectors = func.vector_send(memories.c.embedding).label("vector")
            columns = (memories.c.key, vectors) if strategy == "diverse" else (memories.c.key,)
            rows = conn.execute(select(*columns).where(where).order_by(memories.c.key)).all()
            rng = random.Random(seed)
            if strategy == "random" or len(rows) <= k:
                picked = rng.sample(range(len(rows)), min(k, len(rows)))
            else:
                matrix = np.stack([from_vector_send(row.vector, self.column_dims) for row in rows])
                picked = _farthest_points(matrix, k, rng.randrange(len(rows)))
            return self._fetch(conn, [rows[i].key for i in picked]) if picked else []

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

    def events(self, *, op: str | None = None, after: int | None = None, episode: str | None = None) -> list[MemoryEventRecord]:
        """The event log of this namespace, oldest first (only `op` events, only those after event id
        `after`, only those tagged `episode`)."""
        query = select(events).where(events.c.namespace == self.path)
        if op is not None:
            query = query.where(events.c.op == op)
        if episode is not None:
            query = query.where(events.c.episode == episode)
        if after is not None:
            query = query.where(events.c.id > after)
        with self.engine.connect() as conn:
            return [_event_record(r) for r in conn.execute(query.order_by(events.c.id))]

    def last_event(self, op: str) -> MemoryEventRecord | None:
        """The namespace's latest `op` event, or None."""
        query = select(events).where(events.c.namespace == self.path, events.c.op == op).order_by(events.c.id.desc()).limit(1)
        row = self._autocommitted(lambda conn: conn.execute(query).first())
        return _event_record(row) if row is not None else None

    def forked_from(self) -> str | None:
        """The path of the namespace this one was forked from (`fork` or `fork_keys`), None if it was not."""
        first = select(events.c.after["source"].astext).where(events.c.namespace == self.path, events.c.op == "fork")
        return self._autocommitted(lambda conn: conn.execute(first.order_by(events.c.id).limit(1)).scalar())

    def version(self) -> NamespaceVersion:
        """(count, max seq, max updated_at) of the namespace: moves with every write; the same version a
        fork diff reads of its base (`NamespaceChanges.base_version`)."""
        return NamespaceVersion(*self._autocommitted(lambda conn: conn.execute(VERSION, {"namespace": self.path}).one()))

    def vectors(self) -> tuple[list[str], np.ndarray]:
        """The keys in namespace order and their embeddings as a float32 matrix (zeros where a row has none)."""
        query = select(memories.c.key, func.vector_send(memories.c.embedding)).where(memories.c.namespace == self.path)
        rows = self._autocommitted(lambda conn: conn.execute(query.order_by(memories.c.seq)).all())
        if not rows:
            return [], np.zeros((0, self.column_dims), dtype=np.float32)
        return [row[0] for row in rows], np.stack([from_vector_send(row[1], self.column_dims) for row in rows])

    def vectors_of(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The embeddings of the memories `keys`, by key (rows with none, and missing keys, are left out)."""
        if not keys:
            return {}
        query = select(memories.c.key, func.vector_send(memories.c.embedding)).where(
            memories.c.namespace == self.path, memories.c.key.in_(list(keys)), memories.c.embedding.is_not(None)
        )
        rows = self._autocommitted(lambda conn: conn.execute(query).all())
        return {key: from_vector_send(raw, self.column_dims) for key, raw in rows}

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
            check_content(content)
        if kind is not None:
            check_kind(kind)
        if metadata is not None:
            check_metadata(metadata)
        vector = self.embedder.embed([content])[0] if content is not None else None
        if "\x00" in key:  # PostgreSQL text cannot hold NUL, so no stored key does (and the query would fail)
            raise MemoryNotFound(key, self.path)
        params = {"namespace_path": self.path, "memory_key": key, "new_content": content, "new_embedding": vector,
                  "new_kind": kind, "new_metadata": metadata, "episode": self.episode}
        # One statement (the row locked, changed and its event written): atomic without a transaction.
        row = self._autocommitted(lambda conn: conn.execute(UPDATE_LOGGED, params).first())
        if row is None:
            raise MemoryNotFound(key, self.path)
        return record_of(row)

    def delete(self, key: str, *, final_metadata: dict[str, Any] | None = None) -> MemoryRecord:
        """Remove a memory; returns what was removed. With `final_metadata`, its metadata is first replaced
        by that (an update event), then it is removed (a delete event whose record carries it), in ONE
        transaction: a supersession's `superseded_by` is never left on a memory that was not removed."""
        if final_metadata is None:
            return self.replace([key], [])[0]
        check_metadata(final_metadata)
        self._check_keys([key])
        params = {"namespace_path": self.path, "memory_key": key, "new_content": None, "new_embedding": None,
                  "new_kind": None, "new_metadata": final_metadata, "episode": self.episode}
        with self.engine.begin() as conn:
            if conn.execute(UPDATE_LOGGED, params).first() is None:
                raise MemoryNotFound(key, self.path)
            removed = conn.execute(DELETE_ONE_LOGGED, {k: params[k] for k in ("namespace_path", "memory_key", "episode")})
            return self._in_order([key], removed.all())[0]

    def replace(
        self, delete_keys: Sequence[str], items: Sequence[NewMemory], *, skip_existing: bool = False
    ) -> list[MemoryRecord]:
        """Delete `delete_keys` and add `items` in one transaction (merge and split are this, in one statement).

        Returns the created memories, or the deleted ones when nothing is created. `skip_existing`: see
        `create_many`.
        """
        for item in items:
            check_content(item.content)
            check_kind(item.kind)
            check_metadata(item.metadata)
            if item.key is not None and not KEY_PATTERN.fullmatch(item.key):
                raise InvalidMemory(f"memory key {item.key!r} must be 1-128 letters, digits or _ . : @ + = -")
        if len(set(delete_keys)) != len(delete_keys):
            raise InvalidMemory(f"memory ids {list(delete_keys)!r} name the same memory twice")
        if not items:
            return self._delete(delete_keys)
        vectors = self.embedder.embed([item.content for item in items])
        if not delete_keys and len(items) == 1 and not skip_existing:
            return [self._create(items[0], vectors[0])]
        if delete_keys and not skip_existing:
            return self._replace(delete_keys, items, vectors)
        with self.engine.begin() as conn:
            removed = self._remove(conn, delete_keys) if delete_keys else []
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
                    if skip_existing:  # ON CONFLICT waits for a concurrent insert of the key, then skips
                        # One statement compiled once, its rows sent in pages (SQLAlchemy's "insertmanyvalues":
                        # 1,000 rows a page, under PostgreSQL's 65,535 parameters), in this one transaction.
                        result = conn.execute(INSERT_NEW, rows)
                    else:
                        result = conn.execute(insert(memories).returning(*RECORD_COLUMNS, sort_by_parameter_order=True), rows)
                except IntegrityError as exc:
                    raise InvalidMemory(
                        f"a memory with one of the keys {[r['key'] for r in rows][:5]} already exists in {self.path!r}: "
                        "update it, or create without a key"
                    ) from exc
                created = [record_of(row) for row in result]
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
        params = {"target_path": fork.path, "source_path": self.path, "episode": fork.episode}
        # One statement: copy and fork event, or nothing when the target is taken; atomic without a transaction.
        row = fork._autocommitted(lambda conn: conn.execute(FORK_LOGGED, params).one())
        if row.taken:
            raise InvalidNamespace(f"namespace {fork.path!r} already has memories: drop it or fork to a new name")
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

    def fork_keys(self, target: MemoryStore, keys: Sequence[str]) -> int:
        """Copy the memories `keys`, embeddings included, into the empty namespace of `target` (a fork of
        part of this namespace, logged as a `fork` event in `target`'s episode); returns how many were copied."""
        with self.engine.begin() as conn:
            if conn.execute(select(memories.c.id).where(memories.c.namespace == target.path).limit(1)).first():
                raise InvalidNamespace(f"namespace {target.path!r} already has memories: drop it first")
            copied = len(conn.execute(copy_rows(self.path, target.path, keys).returning(memories.c.id)).all())
            target.append_events([NewEvent("fork", None, None, {"source": self.path, "memories": copied, "keys": len(keys)})],
                                 connection=conn)
        return copied

    def fold(self, part: MemoryStore) -> None:
        """Move the edits made on `part` (a `fork_keys` of this namespace) into this namespace, with their
        event rows, in one transaction; `part` is dropped."""
        written = events.c.op.in_(("create", "update", "delete"))
        with self.engine.begin() as conn:
            touched = set(
                conn.execute(select(events.c.memory_key).where(events.c.namespace == part.path, written)).scalars()
            )
            if touched:
                conn.execute(delete(memories).where(memories.c.namespace == self.path, memories.c.key.in_(touched)))
                conn.execute(copy_rows(part.path, self.path, touched))
                columns = ["namespace", "memory_key", "op", "before", "after", "episode", "created_at"]
                logged = (
                    select(literal(self.path), *(events.c[c] for c in columns[1:]))
                    .where(events.c.namespace == part.path, written)
                    .order_by(events.c.id)
                )
                conn.execute(insert(events).from_select(columns, logged))
            conn.execute(DROP, {"namespace_path": part.path})

    def append_events(self, entries: Iterable[NewEvent], *, connection: Connection | None = None) -> None:
        """Append event rows to this namespace's log, tagged with this store's episode: in `connection`'s
        transaction when given (a write another layer makes there, e.g. a change applied), else in one of its own."""
        rows = [
            {"namespace": self.path, "memory_key": e.memory_key, "op": e.op, "before": e.before, "after": e.after,
             "episode": self.episode}
            for e in entries
        ]
        if not rows:
            return
        if connection is not None:
            connection.execute(insert(events), rows)
        else:
            with self.engine.begin() as conn:
                conn.execute(insert(events), rows)

    def drop(self, *, keep_events: bool = False) -> int:
        """Delete every memory of the namespace (and its event log unless `keep_events`); returns how many."""
        statement = DROP_KEEPING_EVENTS if keep_events else DROP
        params = {"namespace_path": self.path, "episode": self.episode}
        return self._autocommitted(lambda conn: conn.execute(statement, params).scalar_one())

    # -- internals -------------------------------------------------------------------------------

    def _autocommitted(self, work: Callable[[Connection], T]) -> T:
        """`work(conn)` on a pooled connection in autocommit mode: no BEGIN, no ROLLBACK or COMMIT, no
        pre-ping (a dead pooled connection is retried once on a fresh one). For reads, and for writes of
        ONE statement, which is then its own transaction."""
        return retrying(_autocommit(self.engine).connect, work)

    def _create(self, item: NewMemory, vector: np.ndarray) -> MemoryRecord:
        """Add one memory and its create event in one statement."""
        key = item.key or str(uuid.uuid4())
        params = {"namespace_path": self.path, "memory_key": key, "new_content": item.content, "new_kind": item.kind,
                  "new_metadata": item.metadata, "new_embedding": vector, "episode": self.episode}
        try:
            return record_of(self._autocommitted(lambda conn: conn.execute(CREATE_LOGGED, params).one()))
        except IntegrityError as exc:
            raise InvalidMemory(
                f"a memory with one of the keys {[key]} already exists in {self.path!r}: update it, or create without a key"
            ) from exc

    def _replace(self, delete_keys: Sequence[str], items: Sequence[NewMemory], vectors: np.ndarray) -> list[MemoryRecord]:
        """Remove `delete_keys` and add `items` with their events in one statement (merge, split); nothing
        written and MemoryNotFound naming the first missing key when one is not in the namespace."""
        self._check_keys(delete_keys)
        keys = [item.key or str(uuid.uuid4()) for item in items]
        params = {
            "namespace_path": self.path, "episode": self.episode, "keys": list(delete_keys), "new_keys": keys,
            "new_contents": [item.content for item in items], "new_kinds": [item.kind for item in items],
            "new_metadata": [json.dumps(item.metadata) for item in items],
            "new_embeddings": [vector_text(vector) for vector in vectors],
        }
        try:
            rows = self._autocommitted(lambda conn: conn.execute(REPLACE_LOGGED, params).all())
        except IntegrityError as exc:
            raise InvalidMemory(
                f"a memory with one of the keys {keys[:5]} already exists in {self.path!r}: update it, or create without a key"
            ) from exc
        self._in_order(delete_keys, [row for row in rows if row.side == "removed"])  # names a missing key
        return self._in_order(keys, [row for row in rows if row.side == "created"])

    def _delete(self, keys: Sequence[str]) -> list[MemoryRecord]:
        """Remove `keys` and log a delete event each, in one statement; MemoryNotFound (nothing removed)
        naming the first key that is missing."""
        self._check_keys(keys)
        if len(keys) == 1:  # nothing to undo when the one key is missing: no transaction needed
            params = {"namespace_path": self.path, "memory_key": keys[0], "episode": self.episode}
            rows = self._autocommitted(lambda conn: conn.execute(DELETE_ONE_LOGGED, params).all())
            return self._in_order(keys, rows)
        params = {"namespace_path": self.path, "keys": list(keys), "episode": self.episode}
        with self.engine.begin() as conn:  # a missing key must roll back the others' removal
            return self._in_order(keys, conn.execute(DELETE_LOGGED, params).all())

    def _remove(self, conn, keys: Sequence[str]) -> list[MemoryRecord]:
        """Remove `keys` in `conn`'s transaction (the DELETE locks and returns them, no SELECT first)."""
        self._check_keys(keys)
        query = delete(memories).where(memories.c.namespace == self.path, memories.c.key.in_(keys))
        return self._in_order(keys, conn.execute(query.returning(*RECORD_COLUMNS)).all())

    def _check_keys(self, keys: Sequence[str]) -> None:
        for key in keys:
            if "\x00" in key:  # PostgreSQL text cannot hold NUL, so no stored key does (and the query would fail)
                raise MemoryNotFound(key, self.path)

    def _in_order(self, keys: Sequence[str], rows) -> list[MemoryRecord]:
        """The records of `rows` in the order of `keys`; MemoryNotFound naming the first key missing."""
        found = {row.key: record_of(row) for row in rows}
        for key in keys:
            if key not in found:
                raise MemoryNotFound(key, self.path)
        return [found[key] for key in keys]

    def _fetch(self, conn, keys: Sequence[str]) -> list[MemoryRecord]:
        """The rows `keys` in that order; MemoryNotFound if any is missing."""
        self._check_keys(keys)
        return self._in_order(keys, conn.execute(_FETCH, {"namespace": self.path, "keys": list(keys)}))

    def _log(self, conn, entries: Iterable[tuple[str, str | None, dict | None, dict | None]]) -> None:
        self.append_events((NewEvent(op, key, before, after) for op, key, before, after in entries), connection=conn)


def copy_rows(source_path: str, target_path: str, keys: Iterable[str]) -> Insert:
    """INSERT ... SELECT of the memories `keys` of `source_path` into `target_path`, in namespace order,
    embeddings included (callers add their event rows)."""
    columns = ["namespace", "key", "content", "kind", "metadata", "embedding", "created_at", "updated_at"]
    rows = (
        select(literal(target_path), *(memories.c[c] for c in columns[1:]))
        .where(memories.c.namespace == source_path, memories.c.key.in_(list(keys)))
        .order_by(memories.c.seq)
    )
    return insert(memories).from_select(columns, rows)


def _event_record(row) -> MemoryEventRecord:
    return MemoryEventRecord(row.id, row.op, row.memory_key, row.before, row.after, row.episode, row.created_at)


# get_many's statement, built once.
_FETCH = select(*RECORD_COLUMNS).where(
    memories.c.namespace == bindparam("namespace"), memories.c.key == func.any(bindparam("keys", type_=ARRAY(Text)))
)


@lru_cache(maxsize=16)
def _autocommit(engine: Engine) -> Engine:
    """`engine` in autocommit mode, sharing its pool: a read or a one-statement write saves the BEGIN and
    ROLLBACK/COMMIT round trips (setting the mode is local to the driver, no round trip)."""
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def drop_fork(fork: MemoryStore) -> int:
    """Drop a fork (its memories and events), once more on a fresh connection if the first try fails: an
    interrupt can break the connection the episode was using, and a fork must not outlive its run. The
    one way memupdate drops a fork (`MemoryStore.forked`, verl's rollouts, `memupdate db forks --prune`)."""
    try:
        return fork.drop()
    except Exception:
        fork.engine.dispose()
        return fork.drop()


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
