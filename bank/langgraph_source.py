"""LangGraph's `PostgresStore` (LangMem's usual store) as a source: read page by page, written back
through LangGraph's own `batch`, and live (`memupdate watch` keeps its banks in step through
`bank/live_sync.py`).

    from memupdate.bank.langgraph_source import SOURCE, read_langgraph_items

    items = read_langgraph_items("postgresql://app@db/app", ("memories",))   # LangMem's items, every user
    SOURCE.export(bank, read_source(bank), apply_deletes=False)            # the bank back to its store

A URL is recorded without its password (`langgraph_uri`): an export or a watch pass takes it from
--source-url, the watched URL or the environment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from memupdate.bank.live_sync import write_live_changes
from memupdate.bank.source_export import write_back
from memupdate.bank.source_kinds import Source, SourceError, SourceItem, SourceKind
from memupdate.bank.source_reports import ExportReport, LiveExport
from memupdate.bank.sources import iso_time
from memupdate.store import MemoryStore, Namespace

PAGE_SIZE = 1000
MAX_ITEMS = 10_000_000  # a prefix read whole (LangGraph's search takes a limit)
POSTGRES_URL = re.compile(r"postgresql(\+\w+)?://")


class LangGraphSource(SourceKind):
    kinds = ("langgraph",)
    accepts = "a postgresql:// URL"
    live = True

    def claims(self, location: str) -> bool:
        return POSTGRES_URL.match(location) is not None

    def why_not(self, location: str) -> str | None:
        if "://" in location:
            return f"source {location!r} is not a PostgreSQL URL: LangGraph's PostgresStore needs postgresql://..."
        return None

    def uri(self, location: str) -> str:
        return langgraph_uri(location)

    def read(self, location: str, prefix: Sequence[str] = (), into: Namespace | None = None) -> tuple[Source, list[SourceItem]]:
        return Source("langgraph", langgraph_uri(location), tuple(prefix), into), read_langgraph_items(location, prefix)

    def export(self, bank: MemoryStore, record: dict[str, Any], *, apply_deletes: bool = False, url: str | None = None) -> ExportReport:
        """Same namespace, same keys for the items the bank came from, new items under UUIDs the bank maps
        to their memories (`store_key`)."""
        from langgraph.store.base import PutOp

        namespace = tuple(record["source_namespace"])
        manager, store = open_langgraph_store(url or record["uri"])
        try:
            def write(puts: dict[str, dict], deletes: list[str]) -> None:
                store.batch([PutOp(namespace, key, value) for key, value in puts.items()] + [PutOp(namespace, key, None) for key in deletes])

            return write_back(bank, record, lambda: {item.key: item for item in namespace_items(store, namespace)}, write,
                              apply_deletes=apply_deletes)
        finally:
            manager.__exit__(None, None, None)

    def export_changes(
        self, bank: MemoryStore, record: dict[str, Any], *, url: str | None = None,
        before_commit: Callable[[], None] | None = None, after_commit: Callable[[], None] | None = None,
    ) -> LiveExport:
        return write_live_changes(bank, record, lambda: open_langgraph_store(url or record["uri"]),
                                  before_commit=before_commit, after_commit=after_commit)


SOURCE = LangGraphSource()


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
    # Every namespace under the prefix in one read (not one search a namespace: a store of many people).
    # No order but the store's own, so the read is one statement: an app's write lands before or after it.
    found = {tuple(ns) for ns in namespaces}
    return [from_langgraph_item(item) for item in store.search(prefix, limit=MAX_ITEMS) if tuple(item.namespace) in found]


def namespace_items(store, namespace: tuple[str, ...]) -> list[SourceItem]:
    """The items of one namespace of a LangGraph store (not of its children), read page by page."""
    items, offset = [], 0
    while True:
        page = store.search(namespace, limit=PAGE_SIZE, offset=offset)
        items += [from_langgraph_item(item) for item in page if tuple(item.namespace) == namespace]
        if len(page) < PAGE_SIZE:
            return items
        offset += PAGE_SIZE


def from_langgraph_item(item) -> SourceItem:
    return SourceItem(tuple(item.namespace), item.key, dict(item.value), iso_time(item.created_at), iso_time(item.updated_at))


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
