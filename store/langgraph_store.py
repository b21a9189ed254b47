"""`PostgresMemoryStore`: LangGraph's `BaseStore` over memupdate's `memories` table.

    from memupdate.store import MemoryStore, as_langgraph_store
    from memupdate.store.langgraph_store import PostgresMemoryStore

    store = PostgresMemoryStore.connect()                 # embedded server unless a URL is set
    store.put(("users", "alice"), "prefs", {"content": "Alice prefers dark mode", "theme": "dark"})
    store.get(("users", "alice"), "prefs").value          # {'content': 'Alice prefers dark mode', 'theme': 'dark'}
    store.search(("users",), query="UI colour preferences", filter={"theme": "dark"}, limit=3)
    store.list_namespaces(prefix=("users",))              # [('users', 'alice')]
    store.delete(("users", "alice"), "prefs")

    lg = as_langgraph_store(MemoryStore.connect(("locomo", "conv-26")))   # same engine and embedder
    lg.search(("locomo", "conv-26"), query="Where did Caroline move from?")  # memupdate's own memories

LangMem and any LangGraph app use it as they would `InMemoryStore`:

    from langgraph.func import entrypoint
    from langmem import create_manage_memory_tool, create_search_memory_tool

    manage = create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"))
    search = create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"))

    @entrypoint(store=store)
    def remember(fact: str) -> str:
        manage.invoke({"content": fact})
        return search.invoke({"query": fact})

    remember.invoke("Bob is allergic to nuts", {"configurable": {"langgraph_user_id": "bob"}})
    # create_react_agent(model, tools=[manage, search], store=store) works the same way.

One row per item: the LangGraph value is kept whole in `metadata["langgraph_value"]`, `content` holds
the text that was embedded (the value's string `content` field, else its JSON, or the text at the
`index` field paths), kind `semantic` unless the value names a valid `kind`. Rows written by
`MemoryStore` (no `langgraph_value`) read as `{"content": ..., "kind": ..., **metadata}`, so both
APIs see the same memories. Every write appends a `memory_events` row (create / update / delete) in
the same transaction; one `batch` is one transaction, its ops applied in order. Namespaces follow
memupdate's rules (`to_namespace`): a bad one raises `InvalidNamespace` before anything is written.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import takewhile
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
)
from sqlalchemy import ColumnElement, Connection, Engine, Row, and_, delete, func, literal, select
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.engine import URL

from memupdate.store.database import get_engine
from memupdate.store.embeddings import Embedder, get_embedder
from memupdate.store.errors import InvalidMemory
from memupdate.store.memory_store import MemoryStore
from memupdate.store.models import MAX_CONTENT_CHARS, MEMORY_KINDS
from memupdate.store.records import SEPARATOR, Namespace, namespace_path, to_namespace
from memupdate.store.statements import RECORD_COLUMNS, events, in_subtree, memories
from memupdate.store.validation import check_schema, holds_nul

VALUE_KEY = "langgraph_value"
MAX_KEY_CHARS = 128  # memories.key is VARCHAR(128)

# The LangGraph value of any row: the stored dict, or a MemoryStore row seen as {"content", "kind", **metadata}.
_value = func.coalesce(
    memories.c.metadata[VALUE_KEY],
    func.jsonb_build_object("content", memories.c.content, "kind", memories.c.kind, type_=JSONB).op(
        "||", return_type=JSONB
    )(memories.c.metadata),
)
_item_columns = (
    memories.c.namespace,
    memories.c.key,
    _value.label("value"),
    memories.c.created_at,
    memories.c.updated_at,
)
_COMPARISONS = {
    "$gt": lambda field, operand: field > operand,
    "$gte": lambda field, operand: field >= operand,
    "$lt": lambda field, operand: field < operand,
    "$lte": lambda field, operand: field <= operand,
}


class PostgresMemoryStore(BaseStore):
    """A LangGraph `BaseStore` on the `memories` table, searchable with memupdate's embedder.

    `index` is LangGraph's `IndexConfig`; only `fields` (paths of the text to embed) applies, the
    embedder being memupdate's. `episode` tags the event rows this store writes.
    """

    __slots__ = ("engine", "embedder", "fields", "episode", "column_dims", "_worker", "_worker_lock")

    def __init__(
        self,
        engine: Engine,
        embedder: Embedder,
        *,
        index: IndexConfig | None = None,
        episode: str | None = None,
    ):
        if index and (extra := set(index) - {"fields", "dims"}):
            raise ValueError(f"index keys {sorted(extra)} are not supported: pass embedder= to choose the model")
        self.engine = engine
        self.embedder = embedder
        self.fields: list[str] | None = list(index["fields"]) if index and index.get("fields") else None
        self.episode = episode
        self._worker: ThreadPoolExecutor | None = None  # abatch's single thread, made on first use
        self._worker_lock = threading.Lock()
        # The schema exists and the embedder fits the vector column (same check, and cache, as MemoryStore).
        self.column_dims = check_schema(engine, embedder)
        if index and index.get("dims", self.column_dims) != self.column_dims:
            raise ValueError(f"index dims={index['dims']} differs from the memories.embedding column ({self.column_dims})")

    @classmethod
    def connect(
        cls,
        url: str | URL | None = None,
        embedder: Embedder | None = None,
        *,
        index: IndexConfig | None = None,
        episode: str | None = None,
    ) -> PostgresMemoryStore:
        """The configured database (embedded by default) with the default embedder."""
        return cls(get_engine(url), embedder or get_embedder(), index=index, episode=episode)

    @classmethod
    def from_memory_store(
        cls, store: MemoryStore, *, index: IndexConfig | None = None, episode: str | None = None
    ) -> PostgresMemoryStore:
        """The database and embedder of `store` (any namespace is reachable, not only its own)."""
        return cls(store.engine, store.embedder, index=index, episode=episode or store.episode)

    def __repr__(self) -> str:
        return f"PostgresMemoryStore({self.engine.url.render_as_string(hide_password=True)!r})"

    # -- BaseStore ---------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops` in order in one transaction; everything is validated and embedded first."""
        ops = list(ops)
        rows, texts = self._prepare(ops)
        vectors = dict(zip(texts, self.embedder.embed(texts), strict=True)) if texts else {}
        with self.engine.begin() as conn:
            return [self._run(conn, op, rows.get(i), vectors) for i, op in enumerate(ops)]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` on this store's one worker thread, so calls apply in the order they were made.

        `asyncio.gather(store.aput(ns, k, a), store.aput(ns, k, b))` (what LangGraph's `ToolNode` does
        with parallel tool calls) must leave `b`, as LangGraph's own stores do; a thread per call would
        commit in whatever order the threads run. The SQL is short and the embedding CPU-bound, so one
        thread costs little; the event loop stays free.
        """
        ops = list(ops)
        return await asyncio.get_running_loop().run_in_executor(self._ordered_worker(), self.batch, ops)

    def _ordered_worker(self) -> ThreadPoolExecutor:
        with self._worker_lock:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memupdate-abatch")
            return self._worker

    # -- internals ---------------------------------------------------------------------------------

    def _prepare(self, ops: Sequence[Op]) -> tuple[dict[int, dict[str, Any]], list[str]]:
        """Validate every op; return the row of each PutOp that writes (by op index) and the texts to embed."""
        rows: dict[int, dict[str, Any]] = {}
        texts: list[str] = []
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                to_namespace(op.namespace)
            elif isinstance(op, SearchOp):
                if op.namespace_prefix:
                    to_namespace(op.namespace_prefix)
                if holds_nul(op.filter):
                    raise ValueError("search filter holds a NUL character (\\x00), which no stored value can hold")
                if op.query:
                    texts.append(op.query)
            elif isinstance(op, PutOp):
                to_namespace(op.namespace)
                if not 1 <= len(op.key) <= MAX_KEY_CHARS or "\x00" in op.key:
                    raise InvalidMemory(f"key {op.key[:40]!r} must be 1 to {MAX_KEY_CHARS} characters, without NUL")
                if op.value is not None:
                    rows[i] = self._row(op)
                    if rows[i]["embed"]:
                        texts.append(rows[i]["content"])
            elif not isinstance(op, ListNamespacesOp):
                raise ValueError(f"unknown store operation {type(op).__name__}")
        return rows, texts

    def _row(self, op: PutOp) -> dict[str, Any]:
        """The columns of a put: the text to embed (and store as `content`), the kind and the whole value."""
        value = dict(op.value or {})
        try:
            as_json = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidMemory(f"value of key {op.key[:40]!r} cannot be stored as JSON ({exc}): use JSON types") from None
        if holds_nul(value):
            raise InvalidMemory(f"value of key {op.key[:40]!r} holds a NUL character (\\x00), which PostgreSQL cannot store")
        paths = op.index if isinstance(op.index, list) else self.fields
        if paths is not None:  # fields missing from the value: stored, not searchable by meaning
            text = "\n".join(t for path in paths for t in get_text_at_path(value, path))
        elif isinstance(value.get("content"), str):
            text = value["content"]
        else:
            text = as_json
        return {
            "content": (text if text.strip() else as_json)[:MAX_CONTENT_CHARS],
            "kind": value["kind"] if value.get("kind") in MEMORY_KINDS else "semantic",
            "metadata": {VALUE_KEY: value},
            "embed": op.index is not False and bool(text.strip()),
        }

    def _run(self, conn: Connection, op: Op, row: dict[str, Any] | None, vectors: dict[str, Any]) -> Result:
        if isinstance(op, GetOp):
            found = conn.execute(select(*_item_columns).where(*_at(op.namespace, op.key))).first()
            return Item(
                namespace=tuple(found.namespace.split(SEPARATOR)), key=found.key, value=found.value,
                created_at=found.created_at, updated_at=found.updated_at,
            ) if found else None
        if isinstance(op, SearchOp):
            return self._search(conn, op, vectors.get(op.query) if op.query else None)
        if isinstance(op, ListNamespacesOp):
            return _list_namespaces(conn, op)
        if row is None:
            self._delete(conn, op)
        else:
            self._put(conn, op, row, vectors.get(row["content"]) if row["embed"] else None)
        return None

    def _search(self, conn: Connection, op: SearchOp, vector: Any) -> list[SearchItem]:
        query = select(*_item_columns).where(*_filter_clauses(op.filter))
        if op.namespace_prefix:
            path = namespace_path(op.namespace_prefix)
            query = query.where(in_subtree(path))
        if vector is None:
            query = query.order_by(memories.c.updated_at.desc(), memories.c.namespace, memories.c.key)
        else:
            distance = memories.c.embedding.cosine_distance(vector)
            query = query.add_columns(distance.label("distance")).order_by(
                distance.asc().nulls_last(), memories.c.namespace, memories.c.key
            )
        rows = conn.execute(query.offset(op.offset).limit(op.limit))
        if vector is None:
            return [_item(row) for row in rows]
        return [_item(row, None if row.distance is None else 1.0 - float(row.distance)) for row in rows]

    def _put(self, conn: Connection, op: PutOp, row: dict[str, Any], vector: Any) -> None:
        before = conn.execute(select(*RECORD_COLUMNS).where(*_at(op.namespace, op.key)).with_for_update()).first()
        values = {k: row[k] for k in ("content", "kind", "metadata")} | {"embedding": vector}
        stmt = insert(memories).values(namespace=namespace_path(op.namespace), key=op.key, **values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[memories.c.namespace, memories.c.key],
            set_={**{k: stmt.excluded[k] for k in values}, "updated_at": func.clock_timestamp()},
        )
        after = conn.execute(stmt.returning(*RECORD_COLUMNS)).one()
        op_name = "update" if before else "create"
        self._log(conn, op.namespace, op_name, op.key, _event(before) if before else None, _event(after))

    def _delete(self, conn: Connection, op: PutOp) -> None:
        removed = conn.execute(delete(memories).where(*_at(op.namespace, op.key)).returning(*RECORD_COLUMNS)).first()
        if removed:
            self._log(conn, op.namespace, "delete", op.key, _event(removed), None)

    def _log(self, conn: Connection, namespace: Namespace, op: str, key: str, before: Any, after: Any) -> None:
        row = {"namespace": namespace_path(namespace), "memory_key": key, "op": op, "episode": self.episode}
        conn.execute(insert(events).values(**row, before=before, after=after))


def _at(namespace: Namespace, key: str) -> tuple[ColumnElement[bool], ...]:
    return memories.c.namespace == namespace_path(namespace), memories.c.key == key


def _item(row: Row, score: float | None = None) -> SearchItem:
    """A search result."""
    return SearchItem(
        namespace=tuple(row.namespace.split(SEPARATOR)),
        key=row.key,
        value=row.value,
        created_at=row.created_at,
        updated_at=row.updated_at,
        score=score,
    )


def _event(row: Row) -> dict[str, Any]:
    """The event-log shape MemoryStore writes (`MemoryRecord.as_event`)."""
    return {"key": row.key, "content": row.content, "kind": row.kind, "metadata": row.metadata}


def _filter_clauses(filter: Mapping[str, Any] | None) -> list[ColumnElement[bool]]:
    """Exact match per top-level key (jsonb containment, as InMemoryStore for nested dicts), or operators
    `{"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": x}`; order comparisons only hold between values of one JSON type."""
    clauses = []
    for key, wanted in (filter or {}).items():
        is_operators = isinstance(wanted, dict) and wanted and all(str(k).startswith("$") for k in wanted)
        for operator, operand in wanted.items() if is_operators else [("$eq", wanted)]:
            if _non_finite(operand):
                clauses.append(_non_finite_clause(key, operator, operand))
            elif operator == "$eq":
                clauses.append(_value.contains({key: operand}))
            elif operator == "$ne":
                clauses.append(~_value.contains({key: operand}))
            elif operator in _COMPARISONS:
                field, bound = _value[key], literal(operand, JSONB)
                clauses.append(
                    and_(func.jsonb_typeof(field) == func.jsonb_typeof(bound), _COMPARISONS[operator](field, bound))
                )
            else:
                raise ValueError(f"filter operator {operator!r} on {key!r} is not one of $eq $ne $gt $gte $lt $lte")
    return clauses


def _non_finite(operand: Any) -> bool:
    """Whether `operand` is, or holds, a float that JSON cannot write (inf, -inf, nan)."""
    if isinstance(operand, float):
        return not math.isfinite(operand)
    if isinstance(operand, dict):
        return any(_non_finite(v) for v in operand.values())
    if isinstance(operand, list | tuple):
        return any(_non_finite(v) for v in operand)
    return False


def _non_finite_clause(key: str, operator: str, operand: Any) -> ColumnElement[bool]:
    """`inf`, `-inf` and `nan` have no JSON form, so PostgreSQL cannot compare with them; JSON numbers are
    all finite, so the answer is known per operator, as Python's float comparison (InMemoryStore) gives it."""
    if operator not in ("$eq", "$ne", *_COMPARISONS):
        raise ValueError(f"filter operator {operator!r} on {key!r} is not one of $eq $ne $gt $gte $lt $lte")
    if operator == "$ne":
        return literal(True)
    if operator == "$eq" or not isinstance(operand, float) or math.isnan(operand):
        return literal(False)  # no stored JSON value equals (or orders against) a non-finite number
    is_number = func.jsonb_typeof(_value[key]) == "number"
    below_everything = operand < 0
    return is_number if (operator in ("$gt", "$gte")) == below_everything else literal(False)


def _list_namespaces(conn: Connection, op: ListNamespacesOp) -> list[Namespace]:
    conditions = op.match_conditions or ()
    query = select(memories.c.namespace).distinct()
    for condition in conditions:
        head = list(takewhile(lambda label: label != "*", condition.path))
        # Narrow in SQL by the literal head of a prefix; wildcards and suffixes are matched below.
        if condition.match_type == "prefix" and head:
            path = SEPARATOR.join(head)
            query = query.where(in_subtree(path))
    found = [tuple(path.split(SEPARATOR)) for path in conn.execute(query).scalars()]
    found = [ns[: op.max_depth] for ns in found if all(_matches(c, ns) for c in conditions)]
    return sorted(set(found))[op.offset : op.offset + op.limit]


def _matches(condition: MatchCondition, namespace: Namespace) -> bool:
    """Prefix or suffix match, `*` matching any one label (as InMemoryStore)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        labels = namespace[: len(path)]
    elif condition.match_type == "suffix":
        labels = namespace[len(namespace) - len(path) :]
    else:
        raise ValueError(f"namespace match type {condition.match_type!r} is not 'prefix' or 'suffix'")
    return all(p in ("*", label) for p, label in zip(path, labels, strict=True))
