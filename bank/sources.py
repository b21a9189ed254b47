"""The mapping between a source's items and a bank's memories, and the bank's record of what its source
held. Each kind of source (a LangGraph store, a file) is its own module, registered in
`bank/source_kinds.py`; what is here serves every kind.

    from memupdate.bank.sources import memory_text, read_source

    memory_text({"content": "Alice likes jazz"})   # "Alice likes jazz": the text a policy edits
    read_source(bank)     # the bank's `memory_sources` row: kind, uri, source_namespace, items as last seen

A source item becomes one memory (`bank/source_import.py`) and a memory goes back as an item
(`bank/source_export.py`) through the mapping here: the text is the value's string `content`
(LangMem writes `{"content": ...}`), else the value's JSON; the key is the source key where memupdate
allows it (LangMem's UUIDs are), else a stable hash of it.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert

from memupdate.bank.models import MemorySource
from memupdate.bank.source_kinds import Source, value_hash
from memupdate.store import KEY_PATTERN, NAMESPACE_LABEL, MemoryRecord, MemoryStore

sources = MemorySource.__table__


# -- items <-> memories ------------------------------------------------------------------------------


def iso_time(value: Any) -> str | None:
    """A source's time (a datetime, a Unix time, ISO text) as ISO 8601, or None if it gave none."""
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


def banks_of_source(root: MemoryStore, kinds: Sequence[str], uri: str) -> dict[tuple[str, ...], MemoryStore]:
    """The banks imported from `uri` (as recorded: no password) by a kind named in `kinds`, by their source namespace."""
    with root.engine.connect() as conn:
        query = select(sources.c.namespace, sources.c.source_namespace).where(sources.c.kind.in_(kinds), sources.c.uri == uri)
        rows = conn.execute(query)
        return {tuple(ns): root.scoped(path) for path, ns in rows}


def source_records(root: MemoryStore, kinds: Sequence[str], uri: str, *, banks: Sequence[str] | None = None) -> dict[tuple[str, ...], dict[str, Any]]:
    """The `memory_sources` rows of the banks imported from `uri` by a kind named in `kinds` (of those
    at the paths `banks` only, when given), by their source namespace, in one query (a pass over many
    banks reads them once, not bank by bank)."""
    query = select(sources).where(sources.c.kind.in_(kinds), sources.c.uri == uri)
    if banks is not None:
        query = query.where(sources.c.namespace.in_(list(banks)))
    with root.engine.connect() as conn:
        rows = conn.execute(query).mappings()
        return {tuple(row["source_namespace"]): dict(row) for row in rows}


def written_since(root: MemoryStore, records: dict[tuple[str, ...], dict[str, Any]], banks: Sequence[str]) -> list[str]:
    """Those of `banks` whose source row was written (an import or an export) since `records` were read:
    one query of their times, not of their items."""
    if not banks:
        return []
    seen = {row["namespace"]: (row["imported_at"], row["exported_at"]) for row in records.values()}
    query = select(sources.c.namespace, sources.c.imported_at, sources.c.exported_at).where(sources.c.namespace.in_(list(banks)))
    with root.engine.connect() as conn:
        now = {path: (imported, exported) for path, imported, exported in conn.execute(query)}
    return [path for path in banks if now.get(path) != seen.get(path)]


def write_source(bank: MemoryStore, source: Source, source_namespace: tuple[str, ...], items: dict[str, Any], *, exported: bool = False) -> None:
    """Record `items` (source key -> {key, updated_at, value_hash, content_hash}) as the bank's source state."""
    values = {"namespace": bank.path, "kind": source.kind, "uri": source.uri, "source_namespace": list(source_namespace), "items": items}
    statement = pg_insert(sources).values(values)
    update = {"items": statement.excluded["items"], "source_namespace": statement.excluded.source_namespace}
    update["exported_at" if exported else "imported_at"] = func.now()
    with bank.engine.begin() as conn:
        conn.execute(statement.on_conflict_do_update(index_elements=[sources.c.namespace], set_=update))

