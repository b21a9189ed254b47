"""What a memory source is, and the registry of the kinds memupdate reads: a kind is one module holding
a `SourceKind`, one entry of `SOURCE_MODULES`, and a migration adding its name to `memory_sources.kind`'s
CHECK constraint (`tests/test_migrations.py` fails until it exists).

    from memupdate.bank.source_kinds import claiming_kind, source_kind

    kind = claiming_kind("postgresql://app@db/app")     # the kind that reads this location: LangGraph's store
    source, items = kind.read("postgresql://app@db/app", ("memories",))
    source_kind("texts").live                           # by the name a bank records: False

A kind reads a location's items (`read`), may write a bank back there (`export`) and, if an app keeps
writing there (`live`), lets `memupdate watch` keep its banks in step (`export_changes`). The import,
the source state and the undo's wording are shared (`bank/source_import.py`, `bank/sources.py`); an
export composes `source_export.write_back` with the kind's own read and write of items.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from memupdate.bank.source_reports import ExportReport, LiveExport
from memupdate.errors import MemupdateError
from memupdate.store import Namespace

if TYPE_CHECKING:
    from memupdate.store import MemoryStore

# Kind name -> the module whose `SOURCE` reads it, in the order kinds claim a location. Module paths, not
# objects: bank/models.py reads the names for its CHECK constraint before any source module can import.
SOURCE_MODULES: dict[str, str] = {
    "langgraph": "memupdate.bank.langgraph_source",
    "items": "memupdate.bank.file_source",
    "texts": "memupdate.bank.file_source",
}
SOURCE_KINDS = tuple(SOURCE_MODULES)

_registered: dict[str, SourceKind] = {}  # kinds given as objects (`register`), and the modules' once loaded


class SourceError(MemupdateError):
    """A source cannot be read: a wrong URL, a namespace with no items, a malformed file."""


def value_hash(*parts: Any) -> str:
    """A stable digest of JSON-able parts: how an item's value is recognised as unchanged."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class SourceItem:
    """One item as the source holds it (a LangGraph `Item`, or a text line made into one)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: str | None = None  # ISO 8601, as the source gave it
    updated_at: str | None = None

    @cached_property
    def value_hash(self) -> str:
        """`value_hash` of its value, computed once (a watch pass compares it three times)."""
        return value_hash(self.value)


@dataclass(frozen=True)
class Source:
    """Where a bank's items come from: its kind's name, the location as recorded (`uri`: a URL without
    its password, a file's absolute path), the namespace prefix read and the bank root it goes into."""

    kind: str
    uri: str
    prefix: tuple[str, ...] = ()
    into: Namespace | None = None  # the bank root replacing `prefix` (default: imported/<prefix>)


class SourceKind(ABC):
    """A kind of place memories already live in. `kinds`: the names its banks record (a file of items or
    of texts is one reader, two names); `accepts`: the locations it reads, as a phrase for errors."""

    kinds: ClassVar[tuple[str, ...]]
    accepts: ClassVar[str]
    live: ClassVar[bool] = False  # an app keeps writing there: `memupdate watch` imports and writes back each pass

    @abstractmethod
    def claims(self, location: str) -> bool:
        """Whether `location` (what `memupdate data import` was given) is one of this kind's."""

    @abstractmethod
    def read(self, location: str, prefix: Sequence[str] = (), into: Namespace | None = None) -> tuple[Source, list[SourceItem]]:
        """The items under `prefix` at `location`, and the `Source` their banks record."""

    def why_not(self, location: str) -> str | None:
        """Why a location that looks like this kind's is not one (a mysql:// URL for a PostgreSQL kind)."""
        return None

    def uri(self, location: str) -> str:
        """The location as a bank records it (no password): how a later pass finds the banks it made."""
        return location

    def export(self, bank: MemoryStore, record: dict[str, Any], *, apply_deletes: bool = False, url: str | None = None) -> ExportReport:
        """Write the bank back to where it came from (`record`: its `memory_sources` row)."""
        raise SourceError(f"bank {bank.path!r} came from a {record['kind']} file: export it with --out FILE")

    def export_changes(
        self, bank: MemoryStore, record: dict[str, Any], *, url: str | None = None,
        before_commit: Callable[[], None] | None = None, after_commit: Callable[[], None] | None = None,
    ) -> LiveExport:
        """A live kind: write the bank's applied and undone changes the source has not had yet."""
        raise SourceError(f"bank {bank.path!r} came from a {record['kind']} source, which no app writes to: nothing to keep in step")


def register(kind: SourceKind) -> SourceKind:
    """Add a kind from outside the registry table (a plugin, a test); its names still need the migration."""
    for name in kind.kinds:
        _registered[name] = kind
    return kind


def source_kind(name: str) -> SourceKind:
    """The kind a bank records as `name`."""
    if name not in _registered:
        if name not in SOURCE_MODULES:
            raise SourceError(f"source kind {name!r} is not registered: add its module to SOURCE_MODULES in bank/source_kinds.py")
        register(importlib.import_module(SOURCE_MODULES[name]).SOURCE)
    return _registered[name]


def source_kinds() -> list[SourceKind]:
    """Every kind once, in the order they claim a location: the table's, then those registered."""
    kinds = [source_kind(name) for name in SOURCE_MODULES] + list(_registered.values())
    return list({id(kind): kind for kind in kinds}.values())


def claiming_kind(location: str) -> SourceKind:
    """The kind that reads `location`; SourceError naming the location and what each kind accepts."""
    kind = _claiming(location, source_kinds())
    if kind is None:
        accepted = " nor ".join(k.accepts for k in source_kinds())
        raise SourceError(f"source {location!r} is neither {accepted}: check it")
    return kind


def live_kind(location: str) -> SourceKind | None:
    """The live kind that reads `location` (an app's store `memupdate watch` keeps in step), or None."""
    return _claiming(location, live_kinds())


def live_kinds() -> list[SourceKind]:
    return [kind for kind in source_kinds() if kind.live]


def _claiming(location: str, kinds: list[SourceKind]) -> SourceKind | None:
    for kind in kinds:
        if kind.claims(location):
            return kind
    for kind in kinds:  # a near miss (a mysql:// URL) is named as such, not as "none of these"
        if (reason := kind.why_not(location)) is not None:
            raise SourceError(reason)
    return None
