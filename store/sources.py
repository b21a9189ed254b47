"""Banks from where memories already live, and back: LangGraph's `PostgresStore`, `BaseStore` item
dumps, plain text lines.

    from memupdate.store.sources import import_items, read_langgraph_items, read_file_items

    items = read_langgraph_items("postgresql://app@db/app", ("memories",))   # LangMem's items, every user
    reports = import_items(root, items, source)    # one bank per LangGraph namespace: imported/memories/<user>
    reports[0].summary()     # "imported/memories/alice: 12 new, 1 changed, 0 removed at the source since ..."

    export_langgraph(root.scoped(("imported", "memories", "alice")), apply_deletes=False)

A source item becomes one memory: its text is the value's string `content` (LangMem writes
`{"content": ...}`), else the value's JSON; its key is the source key where memupdate allows it
(LangMem's UUIDs are), else a stable hash of it. Provenance goes into `metadata["imported_from"]`
(source kind, URI without password, namespace, key, created_at, updated_at), the rest of the value
into `metadata["source_value"]`, and the source's creation day into `metadata["date"]` (the policies
anchor "yesterday" to it). Each bank's row in `memory_sources` holds the items as the last import or
export saw them; importing again writes only what changed at the source, never an item edited here
since (that is reported as a conflict and left alone), never one an applied edit removed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from memupdate.store.errors import MemupdateError
from memupdate.store.memory_store import MemoryStore
from memupdate.store.models import MAX_CONTENT_CHARS, MEMORY_KINDS, MemorySource
from memupdate.store.records import (
    KEY_PATTERN,
    MAX_NAMESPACE_DEPTH,
    NAMESPACE_LABEL,
    MemoryRecord,
    Namespace,
    NewMemory,
)

sources = MemorySource.__table__
DEFAULT_BANK_ROOT = "imported"
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


@dataclass
class ImportReport:
    """What one bank's import found at the source and did here."""

    bank: str
    source_namespace: tuple[str, ...]
    first_import: bool
    new_at_source: list[str] = field(default_factory=list)  # source keys
    changed_at_source: list[str] = field(default_factory=list)
    removed_at_source: list[str] = field(default_factory=list)
    unchanged: int = 0
    created: list[str] = field(default_factory=list)  # bank keys
    updated: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # changed at the source and edited here: left alone
    removed_here: list[str] = field(default_factory=list)  # an applied edit removed them: not resurrected

    def summary(self) -> str:
        if self.first_import:
            head = f"{self.bank}: imported {len(self.created)} memories"
        else:
            head = (
                f"{self.bank}: at the source since the last import {len(self.new_at_source)} new, "
                f"{len(self.changed_at_source)} changed, {len(self.removed_at_source)} removed, {self.unchanged} unchanged; "
                f"here {len(self.created)} created, {len(self.updated)} updated"
            )
        notes = []
        if self.conflicts:
            notes.append(f"{len(self.conflicts)} changed at the source but edited here, left alone: {_few(self.conflicts)}")
        if self.removed_here:
            notes.append(f"{len(self.removed_here)} removed here by an applied edit, not re-added")
        if self.removed_at_source and not self.first_import:
            notes.append(f"removed at the source, kept here: {_few(self.removed_at_source)}")
        return "; ".join([head, *notes])

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()} | {"source_namespace": list(self.source_namespace)}


# -- reading sources ----------------------------------------------------------------------------------


def langgraph_uri(url: str) -> str:
    """The URL as kept in provenance: no password (a re-export takes it from --url or the environment)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SourceError(f"source {url!r} is not a database URL: give postgresql://user@host:5432/db") from None
    return parsed.set(password=None).render_as_string(hide_password=False)


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
    items: list[SourceItem] = []
    for namespace in namespaces:
        offset = 0
        while True:
            page = store.search(namespace, limit=PAGE_SIZE, offset=offset)
            items += [_from_item(item) for item in page if tuple(item.namespace) == tuple(namespace)]
            if len(page) < PAGE_SIZE:
                break
            offset += PAGE_SIZE
    return items


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


def _from_item(item) -> SourceItem:
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


def bank_label(label: str) -> str:
    """A namespace label memupdate allows for a source label (the original stays in provenance)."""
    if NAMESPACE_LABEL.fullmatch(label):
        return label
    cleaned = re.sub(r"[^A-Za-z0-9_.:@+=-]", "_", label)
    if not cleaned or not re.match(r"[A-Za-z0-9_]", cleaned):
        cleaned = "_" + cleaned
    return cleaned[:48] + "-" + hashlib.sha256(label.encode()).hexdigest()[:8] if len(cleaned) > 56 else cleaned


def bank_namespace(source: Source, source_namespace: Sequence[str]) -> Namespace:
    rest = tuple(source_namespace[len(source.prefix) :]) if tuple(source_namespace[: len(source.prefix)]) == source.prefix else tuple(source_namespace)
    root = source.into if source.into is not None else (DEFAULT_BANK_ROOT, *source.prefix)
    namespace = tuple(root) + rest
    labels = tuple(bank_label(label) for label in namespace) or (DEFAULT_BANK_ROOT,)
    if len(labels) > MAX_NAMESPACE_DEPTH:
        raise SourceError(
            f"source namespace {'/'.join(source_namespace)!r} is too deep for a bank under {'/'.join(root)!r} "
            f"(at most {MAX_NAMESPACE_DEPTH} labels): pass --into with fewer labels"
        )
    return labels


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


def content_hash(content: str, kind: str) -> str:
    return _hash(content, kind)


def _memory_for(item: SourceItem, source: Source, key: str) -> NewMemory:
    text = memory_text(item.value)
    if len(text) > MAX_CONTENT_CHARS:
        raise SourceError(
            f"item {'/'.join(item.namespace)}/{item.key} has {len(text)} characters of content, over memupdate's "
            f"limit of {MAX_CONTENT_CHARS}: shorten it at the source or leave it out"
        )
    kind = item.value.get("kind") if item.value.get("kind") in MEMORY_KINDS else "semantic"
    metadata: dict[str, Any] = {
        "imported_from": {
            "source": source.kind,
            "uri": source.uri,
            "namespace": list(item.namespace),
            "key": item.key,
            "created_at": item.created_at,
            "updated_at": item.updated_at,
        },
        "source_value": {k: v for k, v in item.value.items() if k != "content"},
    }
    if item.created_at:
        metadata["date"] = item.created_at[:10]  # the day relative time in the text is anchored to
    return NewMemory(text, kind, metadata, key)


# -- import ------------------------------------------------------------------------------------------


def import_items(root: MemoryStore, items: Iterable[SourceItem], source: Source) -> list[ImportReport]:
    """Write `items` into one bank per source namespace; idempotent. See the module docstring."""
    groups: dict[tuple[str, ...], list[SourceItem]] = {}
    for item in items:
        groups.setdefault(item.namespace, []).append(item)
    return [_import_bank(root, source, namespace, group) for namespace, group in sorted(groups.items())]


def _import_bank(root: MemoryStore, source: Source, source_namespace: tuple[str, ...], items: list[SourceItem]) -> ImportReport:
    bank = root.scoped(bank_namespace(source, source_namespace))
    record = read_source(bank)
    if record is not None and (record["kind"], record["uri"]) != (source.kind, source.uri):
        raise SourceError(
            f"bank {bank.path!r} was imported from {record['kind']} {record['uri']!r}, not {source.uri!r}: "
            "pass --into to import this source into another bank"
        )
    seen: dict[str, Any] = dict(record["items"]) if record else {}
    report = ImportReport(bank.path, source_namespace, first_import=record is None)
    by_key = {item.key: item for item in items}  # a key twice in one source: the last wins, as in a store
    current = {m.key: m for m in bank.list()}
    removed_here = bank.deleted_keys() if record else set()
    new: list[NewMemory] = []
    for source_key, item in by_key.items():
        key = bank_key(source_key)
        before = seen.get(source_key)
        value_hash = _hash(item.value)
        if before is None:
            report.new_at_source.append(source_key)
        elif before.get("updated_at") == item.updated_at and before.get("value_hash") == value_hash:
            report.unchanged += 1
            continue
        else:
            report.changed_at_source.append(source_key)
        memory = _memory_for(item, source, key)
        state = {"key": key, "updated_at": item.updated_at, "value_hash": value_hash, "content_hash": content_hash(memory.content, memory.kind)}
        row = current.get(key)
        if row is None:
            if key in removed_here:
                report.removed_here.append(key)
                if before is not None:
                    report.conflicts.append(source_key)
                continue
            new.append(memory)
            seen[source_key] = state
        elif before is not None and content_hash(row.content, row.kind) != before.get("content_hash"):
            report.conflicts.append(source_key)  # edited here since: never overwritten by the source
        elif before is None and row.metadata.get("imported_from", {}).get("key") != source_key:
            raise SourceError(
                f"bank {bank.path!r} already holds a memory {key!r} that was not imported from {source.uri!r}: "
                "pass --into to import into a fresh bank"
            )
        else:
            if (row.content, row.kind, row.metadata) != (memory.content, memory.kind, memory.metadata):
                bank.update(key, content=memory.content, kind=memory.kind, metadata=memory.metadata)
                report.updated.append(key)
            seen[source_key] = state
    if new:
        report.created += [m.key for m in bank.create_many(new, skip_existing=True)]
    report.removed_at_source = sorted(k for k in seen if k not in by_key) if record else []
    _write_source(bank, source, source_namespace, seen)
    return report


def read_source(bank: MemoryStore) -> dict[str, Any] | None:
    """The bank's `memory_sources` row as a dict, or None if it was not imported."""
    with bank.engine.connect() as conn:
        row = conn.execute(select(sources).where(sources.c.namespace == bank.path)).mappings().first()
    return dict(row) if row else None


def _write_source(bank: MemoryStore, source: Source, source_namespace: tuple[str, ...], items: dict[str, Any], *, exported: bool = False) -> None:
    values = {"namespace": bank.path, "kind": source.kind, "uri": source.uri, "source_namespace": list(source_namespace), "items": items}
    statement = pg_insert(sources).values(values)
    update = {"items": statement.excluded["items"], "source_namespace": statement.excluded.source_namespace}
    update["exported_at" if exported else "imported_at"] = func.now()
    with bank.engine.begin() as conn:
        conn.execute(statement.on_conflict_do_update(index_elements=[sources.c.namespace], set_=update))


# -- export ------------------------------------------------------------------------------------------


@dataclass
class ExportReport:
    """What an export wrote at the source, and what it left alone."""

    bank: str
    target: str
    written_new: list[str] = field(default_factory=list)  # source keys
    written_changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    to_delete: list[str] = field(default_factory=list)  # removed here; deleted at the source only with --apply
    changed_at_source: list[str] = field(default_factory=list)  # moved since the import: left alone
    unchanged: int = 0

    def summary(self) -> str:
        parts = [
            f"{self.bank} -> {self.target}: {len(self.written_new)} new and {len(self.written_changed)} changed items written",
            f"{len(self.deleted)} deleted" if self.deleted else f"{len(self.to_delete)} removed here (deleted there only with --apply)",
            f"{self.unchanged} unchanged",
        ]
        if self.changed_at_source:
            parts.append(f"{len(self.changed_at_source)} changed at the source since the import, left alone: {_few(self.changed_at_source)}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def plan_export(bank: MemoryStore, record: dict[str, Any], current: dict[str, SourceItem]) -> tuple[ExportReport, dict[str, dict], list[str]]:
    """What to write: (report, source key -> value to put, source keys to delete), checking each item
    against the source as it is now (`current`, by source key)."""
    report = ExportReport(bank.path, record["uri"])
    seen: dict[str, Any] = record["items"]
    by_bank_key = {state["key"]: source_key for source_key, state in seen.items()}
    puts: dict[str, dict] = {}
    held = bank.list()
    for memory in held:
        source_key = by_bank_key.get(memory.key)
        if source_key is None:  # new here (a merge or split result, a created memory): its own key
            if memory.key in current:
                report.changed_at_source.append(memory.key)
                continue
            puts[memory.key] = item_value(memory, None)
            report.written_new.append(memory.key)
            continue
        state = seen[source_key]
        if content_hash(memory.content, memory.kind) == state.get("content_hash"):
            report.unchanged += 1
            continue
        if _moved(current.get(source_key), state):
            report.changed_at_source.append(source_key)
            continue
        original = current[source_key].value
        puts[source_key] = item_value(memory, original)
        report.written_changed.append(source_key)
    present = {memory.key for memory in held}
    deletes = []
    for bank_k, source_key in by_bank_key.items():
        if bank_k in present:
            continue
        if source_key not in current:
            continue  # already gone at the source
        if _moved(current[source_key], seen[source_key]):
            report.changed_at_source.append(source_key)
            continue
        deletes.append(source_key)
    return report, puts, deletes


def _has(bank: MemoryStore, key: str) -> bool:
    from memupdate.store.statements import memories

    with bank.engine.connect() as conn:
        return conn.execute(select(memories.c.id).where(memories.c.namespace == bank.path, memories.c.key == key)).first() is not None


def _moved(item: SourceItem | None, state: dict[str, Any]) -> bool:
    """Whether the source item changed (or vanished) since the import or export that wrote `state`."""
    return item is None or item.updated_at != state.get("updated_at") or _hash(item.value) != state.get("value_hash")


def export_langgraph(bank: MemoryStore, *, apply_deletes: bool = False, url: str | None = None) -> ExportReport:
    """Write the bank back to the LangGraph store it was imported from: same namespace, same keys for
    the items it came from, new items under their memupdate keys; removed items are deleted there only
    with `apply_deletes`; an item changed at the source since the import is reported and left alone."""
    record = read_source(bank)
    if record is None:
        raise SourceError(f"bank {bank.path!r} was not imported (`memupdate data import`): nothing to export it to")
    if record["kind"] != "langgraph":
        raise SourceError(f"bank {bank.path!r} came from a {record['kind']} file: export it with --out FILE")
    target_url = url or record["uri"]
    namespace = tuple(record["source_namespace"])
    manager, store = open_langgraph_store(target_url)
    try:
        current = {item.key: item for item in _namespace_items(store, namespace)}
        report, puts, deletes = plan_export(bank, record, current)
        from langgraph.store.base import PutOp

        ops = [PutOp(namespace, key, value) for key, value in puts.items()]
        if apply_deletes:
            ops += [PutOp(namespace, key, None) for key in deletes]
            report.deleted = deletes
        else:
            report.to_delete = deletes
        if ops:
            store.batch(ops)
        after = {item.key: item for item in _namespace_items(store, namespace)}
    finally:
        manager.__exit__(None, None, None)
    seen = dict(record["items"])
    _record_written(bank, seen, puts, after, report.deleted)
    _write_source(bank, Source(record["kind"], record["uri"]), namespace, seen, exported=True)
    return report


def export_file(bank: MemoryStore, path: Path) -> ExportReport:
    """Write the bank as a JSON list of LangGraph items (`Item.dict()` shape) under its source namespace."""
    record = read_source(bank)
    namespace = list(record["source_namespace"]) if record else list(bank.namespace)
    by_bank_key = {s["key"]: k for k, s in (record or {"items": {}})["items"].items()}
    rows = []
    report = ExportReport(bank.path, str(path))
    for memory in bank.list():
        source_key = by_bank_key.get(memory.key, memory.key)
        origin = memory.metadata.get("imported_from") or {}
        rows.append({
            "namespace": namespace, "key": source_key, "value": item_value(memory, None),
            "created_at": origin.get("created_at") or memory.created_at.isoformat(), "updated_at": memory.updated_at.isoformat(),
        })
        (report.written_changed if source_key in (record or {"items": {}})["items"] else report.written_new).append(source_key)
    try:
        path.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise SourceError(f"cannot write {str(path)!r}: {exc.strerror}") from None
    return report


def _record_written(bank: MemoryStore, seen: dict[str, Any], puts: dict[str, dict], after: dict[str, SourceItem], deleted: list[str]) -> None:
    """Remember what the export wrote, so the next import sees those items as in sync."""
    for source_key in puts:
        item = after.get(source_key)
        if item is None:
            continue
        state = seen.get(source_key, {"key": bank_key(source_key)})
        text = memory_text(item.value)
        kind = item.value.get("kind") if item.value.get("kind") in MEMORY_KINDS else "semantic"
        state = {**state, "updated_at": item.updated_at, "value_hash": _hash(item.value)}
        row = bank.get(state["key"]) if _has(bank, state["key"]) else None
        state["content_hash"] = content_hash(row.content, row.kind) if row else content_hash(text, kind)
        seen[source_key] = state
    for source_key in deleted:
        seen.pop(source_key, None)


def _namespace_items(store, namespace: tuple[str, ...]) -> list[SourceItem]:
    items, offset = [], 0
    while True:
        page = store.search(namespace, limit=PAGE_SIZE, offset=offset)
        items += [_from_item(item) for item in page if tuple(item.namespace) == namespace]
        if len(page) < PAGE_SIZE:
            return items
        offset += PAGE_SIZE


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


def _few(keys: Sequence[str], n: int = 5) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")
