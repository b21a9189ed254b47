"""Import: one memupdate bank per source namespace, with provenance; importing again is idempotent and
reports what changed at the source since the last import.

    from memupdate.bank.source_import import import_source

    reports = import_source(root, "postgresql://app@db/app", ("memories",))   # any registered kind's location
    reports[0].summary()     # "imported/memories/alice: at the source since the last import 1 new, ..."

Provenance goes into `metadata["imported_from"]` (source kind, URI without password, namespace, key,
created_at, updated_at), the rest of the value into `metadata["source_value"]`, and the source's
creation day into `metadata["date"]` (the policies anchor "yesterday" to it). Each bank's row in
`memory_sources` holds the items as the last import or export saw them; importing again writes only
what changed at the source, never an item edited here since (reported as a conflict and left alone),
never one an applied edit removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memupdate.bank.source_kinds import Source, SourceError, SourceItem, claiming_kind
from memupdate.bank.source_reports import few_keys
from memupdate.bank.sources import (
    bank_key,
    bank_label,
    memory_digest,
    memory_text,
    read_source,
    write_source,
)
from memupdate.store import (
    MAX_CONTENT_CHARS,
    MAX_NAMESPACE_DEPTH,
    MEMORY_KINDS,
    MemoryStore,
    Namespace,
    NewMemory,
)

DEFAULT_BANK_ROOT = "imported"


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
    mirrored_removals: list[str] = field(default_factory=list)  # removed at the source, so removed here (mirror)

    def from_app(self) -> str:
        """What this import brought from the app, in a phrase; '' when nothing moved at the source."""
        if self.first_import:
            return f"imported {len(self.created)} item{'s' if len(self.created) != 1 else ''} from the app"
        counts = (len(self.new_at_source), len(self.changed_at_source), len(self.removed_at_source))
        if not any(counts):
            return ""
        return "from the app: {} new, {} changed, {} removed item{}".format(*counts, "" if sum(counts) == 1 else "s")

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
            notes.append(f"{len(self.conflicts)} changed at the source but edited here, left alone: {few_keys(self.conflicts)}")
        if self.removed_here:
            notes.append(f"{len(self.removed_here)} removed here by an applied edit, not re-added")
        if self.mirrored_removals:
            notes.append(f"{len(self.mirrored_removals)} removed at the source, so removed here")
        elif self.removed_at_source and not self.first_import:
            notes.append(f"removed at the source, kept here: {few_keys(self.removed_at_source)}")
        return "; ".join([head, *notes])

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()} | {"source_namespace": list(self.source_namespace)}


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


def import_source(root: MemoryStore, location: str, prefix: Sequence[str] = (), into: Namespace | None = None) -> list[ImportReport]:
    """Import the items under `prefix` at `location`, read by the kind that claims it (`bank/source_kinds.py`)."""
    source, items = claiming_kind(location).read(location, tuple(prefix), into)
    return import_items(root, items, source)


def import_items(
    root: MemoryStore, items: Iterable[SourceItem], source: Source, *, mirror: bool = False,
    namespaces: Iterable[tuple[str, ...]] = (), records: dict[tuple[str, ...], dict[str, Any]] | None = None,
) -> list[ImportReport]:
    """Write `items` into one bank per source namespace; idempotent. See the module docstring.

    `mirror` (what `memupdate watch` keeps a live store's banks by): an item removed at the source is
    removed here too (unless edited here since), and an item new at the source is imported even under a
    key an edit here once removed. `namespaces`: source namespaces to visit even with no item left
    (a user whose every memory the app deleted). `records`: the banks' source rows read beforehand
    (`bank.sources.source_records`): a bank absent there is new, and one whose items did not move at the
    source is reported unchanged without a query (a pass over many banks pays only for those that moved)."""
    groups: dict[tuple[str, ...], list[SourceItem]] = {tuple(ns): [] for ns in namespaces}
    for item in items:
        groups.setdefault(item.namespace, []).append(item)
    return [_import_bank(root, source, namespace, group, mirror, records) for namespace, group in sorted(groups.items())]


def _import_bank(
    root: MemoryStore, source: Source, source_namespace: tuple[str, ...], items: list[SourceItem], mirror: bool = False,
    records: dict[tuple[str, ...], dict[str, Any]] | None = None,
) -> ImportReport:
    bank = root.scoped(bank_namespace(source, source_namespace))
    record = read_source(bank) if records is None or (records.get(source_namespace) or {}).get("namespace") != bank.path \
        else records[source_namespace]
    if record is not None and records is not None and unmoved(record, items):
        return ImportReport(bank.path, source_namespace, first_import=False, unchanged=len(items))
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
        before = seen.get(source_key)
        key = before["key"] if before else bank_key(source_key)  # an item memupdate wrote maps to its own key
        item_hash = item.value_hash
        if before is None:
            report.new_at_source.append(source_key)
        elif before.get("updated_at") == item.updated_at and before.get("value_hash") == item_hash:
            report.unchanged += 1
            continue
        else:
            report.changed_at_source.append(source_key)
        memory = _memory_for(item, source, key)
        state = {"key": key, "updated_at": item.updated_at, "value_hash": item_hash, "content_hash": memory_digest(memory.content, memory.kind)}
        row = current.get(key)
        if row is None:
            if key in removed_here and not (mirror and before is None):
                report.removed_here.append(key)
                if before is not None:
                    report.conflicts.append(source_key)
                continue
            new.append(memory)
            seen[source_key] = state
        elif before is not None and memory_digest(row.content, row.kind) != before.get("content_hash"):
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
    if mirror and report.removed_at_source:
        _mirror_removals(bank, seen, report)
    write_source(bank, source, source_namespace, seen)
    return report


def unmoved(record: dict[str, Any], items: list[SourceItem]) -> bool:
    """Whether the source holds exactly the items `record` saw, none changed since."""
    seen = record["items"]
    if len(seen) != len({item.key for item in items}):
        return False
    for item in items:
        before = seen.get(item.key)
        if before is None or before.get("updated_at") != item.updated_at or before.get("value_hash") != item.value_hash:
            return False
    return True


def _mirror_removals(bank: MemoryStore, seen: dict[str, Any], report: ImportReport) -> None:
    """Remove here what was removed at the source, unless it was edited here since (then it is kept and
    reported as a conflict): the bank mirrors a store an app keeps writing."""
    held = {m.key: m for m in bank.list()}
    gone = []
    for source_key in report.removed_at_source:
        key = seen[source_key]["key"]
        row = held.get(key)
        if row is not None and memory_digest(row.content, row.kind) != seen[source_key].get("content_hash"):
            report.conflicts.append(source_key)
            continue
        if row is not None:
            gone.append(key)
        del seen[source_key]
    if gone:
        bank.replace(gone, [])
        report.mirrored_removals += gone

