"""Export: a bank back to the source it was imported from, under the same keys, through its kind
(`bank/source_kinds.py`); deletes there only when asked; never over an item changed at the source since.

    from memupdate.bank.source_export import export_bank

    report = export_bank(bank, apply_deletes=False)   # new and changed items written, removals listed
    report.summary()    # "imported/memories/alice -> postgresql://app@db/app: 1 new and 0 changed items written; ..."

A kind's export is `write_back` over its own read and write of items; what to write (`plan_export`) and
what was written (the bank's source state) are the same for every kind. A dump of any bank to a file:
`bank.file_source.export_file`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memupdate.bank.source_kinds import Source, SourceError, SourceItem, source_kind
from memupdate.bank.source_reports import ExportReport
from memupdate.bank.sources import (
    item_value,
    memory_digest,
    memory_text,
    read_source,
    store_key,
    write_source,
)
from memupdate.store import MEMORY_KINDS, MemoryNotFound, MemoryStore


def plan_export(bank: MemoryStore, record: dict[str, Any], current: dict[str, SourceItem]) -> tuple[ExportReport, dict[str, dict], list[str]]:
    """What to write: (report, source key -> value to put, source keys to delete), checking each item
    against the source as it is now (`current`, by source key)."""
    report = ExportReport(bank.path, record["uri"])
    seen: dict[str, Any] = record["items"]
    by_bank_key = {state["key"]: source_key for source_key, state in seen.items()}
    puts: dict[str, dict] = {}
    bank_keys = {source_key: state["key"] for source_key, state in seen.items()}
    held = bank.list()
    for memory in held:
        source_key = by_bank_key.get(memory.key)
        if source_key is None:  # new here (a merge or split result, a created memory): a key of its own
            new_key = store_key(bank.path, memory.key, memory.metadata)
            if new_key in current:
                report.changed_at_source.append(new_key)
                continue
            puts[new_key] = item_value(memory, None)
            bank_keys[new_key] = memory.key
            report.written_new.append(new_key)
            continue
        state = seen[source_key]
        if memory_digest(memory.content, memory.kind) == state.get("content_hash"):
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
    report.bank_keys = {k: bank_keys[k] for k in puts}
    return report, puts, deletes


def _has(bank: MemoryStore, key: str) -> bool:
    try:
        bank.get(key)
    except MemoryNotFound:
        return False
    return True


def _moved(item: SourceItem | None, state: dict[str, Any]) -> bool:
    """Whether the source item changed (or vanished) since the import or export that wrote `state`."""
    return item is None or item.updated_at != state.get("updated_at") or item.value_hash != state.get("value_hash")


def export_bank(bank: MemoryStore, *, apply_deletes: bool = False, url: str | None = None) -> ExportReport:
    """Write the bank back to the source it was imported from, through its kind (`bank/source_kinds.py`):
    removed items are deleted there only with `apply_deletes`; an item changed at the source since the
    import is reported and left alone. `url`: the source's location when the recorded one lacks a password."""
    record = read_source(bank)
    if record is None:
        raise SourceError(f"bank {bank.path!r} was not imported (`memupdate data import`): nothing to export it to")
    return source_kind(record["kind"]).export(bank, record, apply_deletes=apply_deletes, url=url)


def write_back(
    bank: MemoryStore, record: dict[str, Any], items: Callable[[], dict[str, SourceItem]],
    write: Callable[[dict[str, dict], list[str]], None], *, apply_deletes: bool = False,
) -> ExportReport:
    """An export through a kind's own access to the bank's source namespace: `items()` reads its items by
    source key, `write(puts, deletes)` puts values (source key -> value) and deletes keys. What was
    written is recorded, so the next import sees those items in sync."""
    report, puts, deletes = plan_export(bank, record, items())
    if apply_deletes:
        report.deleted = deletes
    else:
        report.to_delete, deletes = deletes, []
    if puts or deletes:
        write(puts, deletes)
    seen = dict(record["items"])
    _record_written(bank, seen, report.bank_keys, items(), report.deleted)
    write_source(bank, Source(record["kind"], record["uri"]), tuple(record["source_namespace"]), seen, exported=True)
    return report


def _record_written(bank: MemoryStore, seen: dict[str, Any], written: dict[str, str], after: dict[str, SourceItem], deleted: list[str]) -> None:
    """Remember what the export wrote (`written`: source key -> memory key), so the next import sees those
    items as in sync and maps each to its memory."""
    for source_key, key in written.items():
        item = after.get(source_key)
        if item is None:
            continue
        state = seen.get(source_key, {"key": key})
        text = memory_text(item.value)
        kind = item.value.get("kind") if item.value.get("kind") in MEMORY_KINDS else "semantic"
        state = {**state, "updated_at": item.updated_at, "value_hash": item.value_hash}
        row = bank.get(state["key"]) if _has(bank, state["key"]) else None
        state["content_hash"] = memory_digest(row.content, row.kind) if row else memory_digest(text, kind)
        seen[source_key] = state
    for source_key in deleted:
        seen.pop(source_key, None)

