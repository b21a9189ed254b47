"""Where memories already live, read as items, and the bank's record of what its source held:
LangGraph's `PostgresStore`, `BaseStore` item dumps, plain text lines.

    from memupdate.bank.sources import read_file_items, read_langgraph_items, read_source

    items = read_langgraph_items("postgresql://app@db/app", ("memories",))   # LangMem's items, every user
    kind, items = read_file_items(Path("dump.json"))    # "items" (Item.dict() objects) or "texts"
    read_source(bank)     # the bank's `memory_sources` row: kind, uri, source_namespace, items as last seen

A source item becomes one memory (`bank/source_import.py`) and a memory goes back as an item
(`bank/source_export.py`) through the mapping here: the text is the value's string `content`
(LangMem writes `{"content": ...}`), else the value's JSON; the key is the source key where memupdate
allows it (LangMem's UUIDs are), else a stable hash of it. A source that cannot be read raises
`SourceError` with one line naming it and the fix.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from memupdate.bank.models import MemorySource
from memupdate.store.errors import MemupdateError
from memupdate.store.memory_store import MemoryStore
from memupdate.store.records import KEY_PATTERN, NAMESPACE_LABEL, MemoryRecord, Namespace

sources = MemorySource.__table__
PAGE_SIZE = 1000


class SourceError(MemupdateError):
    """A source cannot be read: a wrong URL, a namespace with no items, a malformed file."""


@dataclass(frozen=True)
class SourceItem:
    """One item as the source holds it (a LangGraph `Item`, or a text line made into one)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: str | None = None  # ISO 8601, as the source gave it
    updated_at: str | None = None


@dataclass(frozen=True)
class Source:
    """Where items come from: `kind` langgraph (a database URL), items (a JSON/JSONL dump of
    `BaseStore` items) or texts (JSONL of `{text, created_at?, user?}`)."""

    kind: str
    uri: str
    prefix: tuple[str, ...] = ()
    into: Namespace | None = None  # the bank root replacing `prefix` (default: imported/<prefix>)


# -- reading sources ----------------------------------------------------------------------------------


def langgraph_uri(url: str) -> str:
    """The URL as kept in provenance: no password (a re-export takes it from --url or the environment)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SourceError(f"source {url!r} is not a database URL: give postgresql://user@host:5432/db") from None
    # URL.set(password=None) keeps the password (None means "unchanged"): build the URL without it.
    bare = URL.create(parsed.drivername, parsed.username, None, parsed.host, parsed.port, parsed.database, parsed.query)
    return bare.render_as_string(hide_password=False)


def open_langgraph_store(url: str):
    """LangGraph's own `PostgresStore` on `url` (a context manager); SourceError naming the URL if the
    server cannot be reached or holds no LangGraph store."""
    from langgraph.store.postgres import PostgresStore

    conninfo = _conninfo(url)
    try:
        manager = PostgresStore.from_conn_string(conninfo)
        store = manager.__enter__()
    except Exception as exc:  # psycopg's OperationalError and friends: the message names host and cause
        raise SourceError(f"cannot connect to LangGraph store {langgraph_uri(url)!r}: {_first_line(exc)}; check the URL") from None
    return manager, store


def read_langgraph_items(url: str, prefix: Sequence[str]) -> list[SourceItem]:
    """Every item under `prefix` in the LangGraph `PostgresStore` at `url` (read page by page)."""
    manager, store = open_langgraph_store(url)
    try:
        items = _langgraph_items(store, tuple(prefix), url)
    finally:
        manager.__exit__(None, None, None)
    return items


def _langgraph_items(store, prefix: tuple[str, ...], url: str) -> list[SourceItem]:
    from psycopg.errors import UndefinedTable

    try:
        namespaces = store.list_namespaces(prefix=prefix or None, limit=100_000)
    except UndefinedTable:
        raise SourceError(
            f"database {langgraph_uri(url)!r} holds no LangGraph store (no `store` table): check the URL's database name"
        ) from None
    if not namespaces:
        known = sorted({ns[:2] for ns in store.list_namespaces(limit=10_000)})
        hint = ", ".join("/".join(ns) for ns in known[:8]) or "none: the store is empty"
        raise SourceError(f"LangGraph store {langgraph_uri(url)!r} has no namespace under {'/'.join(prefix)!r}; it has: {hint}")
    return [item for namespace in namespaces for item in namespace_items(store, tuple(namespace))]


def namespace_items(store, namespace: tuple[str, ...]) -> list[SourceItem]:
    """The items of one namespace of a LangGraph store (not of its children), read page by page."""
    items, offset = [], 0
    while True:
        page = store.search(namespace, limit=PAGE_SIZE, offset=offset)
        items += [from_langgraph_item(item) for item in page if tuple(item.namespace) == namespace]
        if len(page) < PAGE_SIZE:
            return items
        offset += PAGE_SIZE


def read_file_items(path: Path) -> tuple[str, list[SourceItem]]:
    """The items of a JSON or JSONL file and its kind: `items` (LangGraph `Item.dict()` objects:
    namespace, key, value, created_at, updated_at) or `texts` (`{text, created_at?, user?}`)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    records = _records(raw, path)
    if not records:
        raise SourceError(f"{str(path)!r} holds no items: give a JSON list or JSONL lines of items or texts")
    kinds = {"texts" if "text" in r and "value" not in r else "items" for r in records}
    if len(kinds) > 1:
        raise SourceError(f"{str(path)!r} mixes text lines ({{text}}) and items ({{namespace, key, value}}): split the file")
    kind = kinds.pop()
    parse = _text_item if kind == "texts" else _dump_item
    items = []
    for number, record in enumerate(records, 1):
        try:
            items.append(parse(record))
        except (KeyError, TypeError, ValueError) as exc:
            raise SourceError(f"{str(path)!r} item {number}: {exc}; see `memupdate data import --help` for the format") from None
    return kind, items


def _records(raw: str, path: Path) -> list[dict[str, Any]]:
    stripped = raw.strip()
    try:
        if stripped.startswith("["):
            data = json.loads(stripped)
        elif stripped.startswith("{") and "\n" not in stripped:
            data = [json.loads(stripped)]
        else:
            data = [json.loads(line) for line in stripped.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise SourceError(f"{str(path)!r} is not JSON or JSONL (line {exc.lineno}: {exc.msg})") from None
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        data = data["items"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise SourceError(f"{str(path)!r} must hold JSON objects, one per item")
    return data


def _dump_item(record: dict[str, Any]) -> SourceItem:
    namespace = record["namespace"]
    if isinstance(namespace, str):
        namespace = namespace.split("/")
    if not isinstance(record["value"], dict):
        raise ValueError("value must be a JSON object (a LangGraph item's value)")
    return SourceItem(tuple(map(str, namespace)), str(record["key"]), record["value"], _iso(record.get("created_at")), _iso(record.get("updated_at")))


def _text_item(record: dict[str, Any]) -> SourceItem:
    text = record["text"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    user = record.get("user")
    created = _iso(record.get("created_at"))
    # The key is the line's identity: the same line imported twice is one memory.
    digest = hashlib.sha256(json.dumps([user, text, created]).encode()).hexdigest()[:16]
    return SourceItem((str(user),) if user else (), f"t{digest}", {"content": text}, created, created)


def from_langgraph_item(item) -> SourceItem:
    return SourceItem(tuple(item.namespace), item.key, dict(item.value), _iso(item.created_at), _iso(item.updated_at))


def _iso(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value).astimezone().isoformat()
    text = str(value)
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).isoformat()
    except ValueError:
        raise ValueError(f"created_at/updated_at {text!r} is not an ISO 8601 time such as 2024-05-07T14:00:00") from None


# -- items <-> memories ------------------------------------------------------------------------------


def memory_text(value: dict[str, Any]) -> str:
    """The text a policy edits: the value's string `content`, else the value's JSON."""
    content = value.get("content")
    return content if isinstance(content, str) else json.dumps(content if content is not None else value, ensure_ascii=False)


def item_value(record: MemoryRecord, original: dict[str, Any] | None) -> dict[str, Any]:
    """The LangGraph value to write for a memory: the imported value with its `content` replaced
    (LangMem's shape, `{"content": ...}`, when the memory is new here)."""
    base = dict(original or record.metadata.get("source_value") or {})
    if original is not None and not isinstance(original.get("content", ""), str):
        try:  # structured content (a LangMem schema) was edited as its JSON
            parsed = json.loads(record.content)
            return parsed if "content" not in original else {**base, "content": parsed}
        except json.JSONDecodeError:
            pass
    return {**base, "content": record.content}


def bank_key(source_key: str) -> str:
    """The memory key for a source key: itself where memupdate allows it, else a stable hash."""
    if KEY_PATTERN.fullmatch(source_key):
        return source_key
    return "k" + hashlib.sha256(source_key.encode()).hexdigest()[:24]


# Names the keys memupdate gives the items it writes into a store (uuid5 over the bank and the memory key).
MEMUPDATE_ITEM_KEYS = uuid.UUID("5d0c1a52-7f3e-4c8e-9a36-36e1d6a0b1f4")


def store_key(bank_path: str, key: str, metadata: dict[str, Any] | None = None) -> str:
    """The key a bank memory gets as an item of the store the bank mirrors: the app's own key for a
    memory imported from it, else a UUID, as LangMem's tools only accept UUIDs (`m3592f718` fails their
    validation). The same memory gets the same UUID every time, so a rerun finds what a killed run wrote;
    the bank maps it back through its source state (`items[uuid]["key"]`)."""
    origin = (metadata or {}).get("imported_from") or {}
    if isinstance(origin.get("key"), str) and bank_key(origin["key"]) == key:
        return origin["key"]  # a split result copies its source's provenance: only the item itself matches
    if len(key) == 36:
        try:
            uuid.UUID(key)
            return key  # a memory created here under a UUID (LangMem's own shape): kept as it is
        except ValueError:
            pass
    return str(uuid.uuid5(MEMUPDATE_ITEM_KEYS, f"{bank_path}\n{key}"))


def bank_label(label: str) -> str:
    """A namespace label memupdate allows for a source label (the original stays in provenance)."""
    if NAMESPACE_LABEL.fullmatch(label):
        return label
    cleaned = re.sub(r"[^A-Za-z0-9_.:@+=-]", "_", label)
    if not cleaned or not re.match(r"[A-Za-z0-9_]", cleaned):
        cleaned = "_" + cleaned
    return cleaned[:48] + "-" + hashlib.sha256(label.encode()).hexdigest()[:8] if len(cleaned) > 56 else cleaned


def value_hash(*parts: Any) -> str:
    """A stable digest of JSON-able parts: how an item's value is recognised as unchanged."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


def memory_digest(content: str, kind: str) -> str:
    """The digest of a memory as a policy sees it (its text and kind): whether it was edited here since
    the import. Kept in the source state under "content_hash"."""
    return value_hash(content, kind)


# -- what the source held, as the last import or export saw it ----------------------------------------


def read_source(bank: MemoryStore) -> dict[str, Any] | None:
    """The bank's `memory_sources` row as a dict, or None if it was not imported."""
    with bank.engine.connect() as conn:
        row = conn.execute(select(sources).where(sources.c.namespace == bank.path)).mappings().first()
    return dict(row) if row else None


def live_banks(root: MemoryStore, uri: str) -> dict[tuple[str, ...], MemoryStore]:
    """The banks imported from the LangGraph store at `uri` (its URI without password), by their source namespace."""
    with root.engine.connect() as conn:
        rows = conn.execute(select(sources.c.namespace, sources.c.source_namespace).where(sources.c.kind == "langgraph", sources.c.uri == uri))
        return {tuple(ns): root.scoped(path) for path, ns in rows}


def write_source(bank: MemoryStore, source: Source, source_namespace: tuple[str, ...], items: dict[str, Any], *, exported: bool = False) -> None:
    """Record `items` (source key -> {key, updated_at, value_hash, content_hash}) as the bank's source state."""
    values = {"namespace": bank.path, "kind": source.kind, "uri": source.uri, "source_namespace": list(source_namespace), "items": items}
    statement = pg_insert(sources).values(values)
    update = {"items": statement.excluded["items"], "source_namespace": statement.excluded.source_namespace}
    update["exported_at" if exported else "imported_at"] = func.now()
    with bank.engine.begin() as conn:
        conn.execute(statement.on_conflict_do_update(index_elements=[sources.c.namespace], set_=update))


def _conninfo(url: str) -> str:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SourceError(f"source {url!r} is not a database URL: give postgresql://user@host:5432/db") from None
    if not parsed.drivername.startswith("postgresql"):
        raise SourceError(f"source {url!r} is not a PostgreSQL URL: LangGraph's PostgresStore needs postgresql://...")
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def few_keys(keys: Sequence[str], n: int = 5) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")
