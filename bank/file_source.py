"""A JSON or JSONL file as a source: a dump of LangGraph items (kind `items`: `Item.dict()` objects)
or text lines (kind `texts`: `{text, created_at?, user?}`), read once; `export_file` writes any bank as
such a dump. A file is not written back in place: an export goes to a new file (`--out`).

    from pathlib import Path
    from memupdate.bank.file_source import export_file, read_file_items

    export_file(bank, Path("items.json"))               # LangGraph `Item.dict()` objects
    kind, items = read_file_items(Path("items.json"))   # "items" or "texts", by the file's records
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memupdate.bank.source_kinds import Source, SourceError, SourceItem, SourceKind
from memupdate.bank.source_reports import ExportReport
from memupdate.bank.sources import bank_label, iso_time, item_value, read_source, store_key
from memupdate.store import MemoryStore, Namespace


class FileSource(SourceKind):
    kinds = ("items", "texts")
    accepts = "a file"

    def claims(self, location: str) -> bool:
        return Path(location).is_file()

    def read(self, location: str, prefix: Sequence[str] = (), into: Namespace | None = None) -> tuple[Source, list[SourceItem]]:
        path = Path(location)
        kind, items = read_file_items(path)
        if kind == "texts" and into is None:  # text lines have no namespace: the bank is named after the file
            into = ("imported", bank_label(path.stem))
        return Source(kind, str(path.resolve()), tuple(prefix), into), items


SOURCE = FileSource()


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
    return SourceItem(tuple(map(str, namespace)), str(record["key"]), record["value"], iso_time(record.get("created_at")),
                      iso_time(record.get("updated_at")))


def _text_item(record: dict[str, Any]) -> SourceItem:
    text = record["text"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    user = record.get("user")
    created = iso_time(record.get("created_at"))
    # The key is the line's identity: the same line imported twice is one memory.
    digest = hashlib.sha256(json.dumps([user, text, created]).encode()).hexdigest()[:16]
    return SourceItem((str(user),) if user else (), f"t{digest}", {"content": text}, created, created)


def export_file(bank: MemoryStore, path: Path) -> ExportReport:
    """Write the bank as a JSON list of LangGraph items (`Item.dict()` shape) under its source namespace."""
    record = read_source(bank)
    namespace = list(record["source_namespace"]) if record else list(bank.namespace)
    by_bank_key = {s["key"]: k for k, s in (record or {"items": {}})["items"].items()}
    rows = []
    report = ExportReport(bank.path, str(path))
    for memory in bank.list():
        source_key = by_bank_key.get(memory.key) or store_key(bank.path, memory.key, memory.metadata)
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
