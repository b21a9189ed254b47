"""A source kind is one module and one registry entry, plus its migration: a toy kind (an in-memory
shelf of items, all of it in this file) imports into banks and exports back through the same verbs as
LangGraph's store and the files, with no other module touched."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from memupdate.bank import source_kinds
from memupdate.bank.live_sync import export_changes, is_live
from memupdate.bank.source_export import ExportReport, export_bank, write_back
from memupdate.bank.source_import import import_source
from memupdate.bank.source_kinds import (
    SOURCE_KINDS,
    Source,
    SourceError,
    SourceItem,
    SourceKind,
    claiming_kind,
    register,
)
from memupdate.bank.sources import read_source
from memupdate.store import MemoryStore


class Shelf(SourceKind):
    """Items kept in a dict, by (namespace, key): the smallest source that can be read and written back."""

    kinds = ("shelf",)
    accepts = "a shelf:NAME"

    def __init__(self) -> None:
        self.items: dict[tuple[tuple[str, ...], str], SourceItem] = {}

    def put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        now = datetime.now(UTC).isoformat()
        held = self.items.get((namespace, key))
        self.items[(namespace, key)] = SourceItem(namespace, key, value, held.created_at if held else now, now)

    def claims(self, location: str) -> bool:
        return location.startswith("shelf:")

    def read(self, location: str, prefix: Sequence[str] = (), into=None) -> tuple[Source, list[SourceItem]]:
        items = [item for item in self.items.values() if item.namespace[: len(prefix)] == tuple(prefix)]
        return Source("shelf", location, tuple(prefix), into), items

    def export(self, bank: MemoryStore, record: dict[str, Any], *, apply_deletes: bool = False, url: str | None = None) -> ExportReport:
        namespace = tuple(record["source_namespace"])

        def held() -> dict[str, SourceItem]:
            return {key: item for (ns, key), item in self.items.items() if ns == namespace}

        def write(puts: dict[str, dict], deletes: list[str]) -> None:
            for key, value in puts.items():
                self.put(namespace, key, value)
            for key in deletes:
                del self.items[(namespace, key)]

        return write_back(bank, record, held, write, apply_deletes=apply_deletes)


@pytest.fixture
def shelf(monkeypatch) -> Shelf:
    """The toy kind, registered for this test only (the registry's table is left as it is)."""
    monkeypatch.setattr(source_kinds, "_registered", dict(source_kinds._registered))
    shelf = register(Shelf())
    shelf.put(("notes", "alice"), "a1", {"content": "Alice moved to Lisbon in 2021"})
    shelf.put(("notes", "alice"), "a2", {"content": "Alice has a dog called Rex"})
    shelf.put(("notes", "bob"), "b1", {"content": "Bob is allergic to nuts", "kind": "episodic"})
    return shelf


@pytest.fixture
def shelf_migration(engine) -> Iterator[None]:
    """What the kind's Alembic revision would do: add its name to `memory_sources.kind`'s CHECK constraint."""
    def allow(kinds: tuple[str, ...]) -> None:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM memory_sources WHERE kind = 'shelf'"))
            conn.execute(text("ALTER TABLE memory_sources DROP CONSTRAINT ck_memory_sources_kind"))
            conn.execute(text(f"ALTER TABLE memory_sources ADD CONSTRAINT ck_memory_sources_kind CHECK (kind IN {kinds})"))

    allow((*SOURCE_KINDS, "shelf"))
    yield
    allow(SOURCE_KINDS)


def test_a_registered_kind_imports_exports_and_reimports_in_sync(shelf: Shelf, shelf_migration, store: MemoryStore) -> None:
    assert claiming_kind("shelf:main") is shelf

    reports = import_source(store, "shelf:main", ("notes",), store.namespace)
    alice = store.scoped((*store.namespace, "alice"))
    assert [r.bank for r in reports] == [alice.path, "/".join((*store.namespace, "bob"))]
    assert alice.get("a1").content == "Alice moved to Lisbon in 2021"
    assert alice.get("a1").metadata["imported_from"]["source"] == "shelf"
    assert store.scoped((*store.namespace, "bob")).get("b1").kind == "episodic"
    assert read_source(alice)["kind"] == "shelf" and not is_live(alice)

    alice.update("a2", content="Alice has two dogs, Rex and Fido")
    alice.create("Alice works as a nurse", key="a3-here")
    alice.delete("a1")
    report = export_bank(alice)
    assert report.written_changed == ["a2"] and len(report.written_new) == 1 and report.to_delete == ["a1"]
    assert shelf.items[(("notes", "alice"), "a2")].value["content"] == "Alice has two dogs, Rex and Fido"
    (new_key,) = report.written_new
    assert shelf.items[(("notes", "alice"), new_key)].value == {"content": "Alice works as a nurse"}
    assert (("notes", "alice"), "a1") in shelf.items  # deleted at the source only when asked
    assert export_bank(alice, apply_deletes=True).deleted == ["a1"] and (("notes", "alice"), "a1") not in shelf.items

    again = import_source(store, "shelf:main", ("notes", "alice"), alice.namespace)
    assert [(r.unchanged, r.created, r.updated, r.conflicts) for r in again] == [(2, [], [], [])]  # the export was recorded
    assert export_changes(alice).written == []  # not live: `memupdate watch` has nothing to write back


def test_a_kind_without_its_migration_is_refused_by_the_database(shelf: Shelf, store: MemoryStore) -> None:
    with pytest.raises(IntegrityError, match="ck_memory_sources_kind"):
        import_source(store, "shelf:main", ("notes", "bob"), store.namespace)


def test_a_location_no_kind_claims_names_every_kind(shelf: Shelf) -> None:
    with pytest.raises(SourceError, match=r"is neither a postgresql:// URL nor a file nor a shelf:NAME: check it"):
        claiming_kind("nowhere/at/all.json")
    with pytest.raises(SourceError, match="is not a PostgreSQL URL"):
        claiming_kind("mysql://app@db/app")


def test_the_registry_names_the_kinds_the_schema_allows() -> None:
    from memupdate.bank.models import MemorySource

    (check,) = [c for c in MemorySource.__table__.constraints if c.name == "ck_memory_sources_kind"]
    assert str(check.sqltext) == f"kind IN {SOURCE_KINDS}" == "kind IN ('langgraph', 'items', 'texts')"
    assert {name: source_kinds.source_kind(name).kinds for name in SOURCE_KINDS} == {
        "langgraph": ("langgraph",), "items": ("items", "texts"), "texts": ("items", "texts")}
    with pytest.raises(SourceError, match="add its module to SOURCE_MODULES"):
        source_kinds.source_kind("shelf")


def test_an_items_value_hash_is_the_source_states() -> None:
    """A pass compares an item's value hash with the source state several times: computed once, it is
    still `value_hash` of its value (what the state recorded), and another value gives another."""
    from memupdate.bank.source_kinds import SourceItem, value_hash

    item = SourceItem(("memories", "ana"), "k1", {"content": "Ana lives in Paris", "kind": "semantic"})
    assert item.value_hash == value_hash({"kind": "semantic", "content": "Ana lives in Paris"})
    assert item.value_hash != SourceItem(item.namespace, "k1", {"content": "Ana lives in Lyon"}).value_hash
