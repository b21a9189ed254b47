"""Migrations keep data, and the store cannot be talked out of its namespace (issue 10, reliability
tests). Real PostgreSQL: a fresh database per migration test; every statement the store sends is read
off SQLAlchemy's cursor events."""

from __future__ import annotations

import os

import pytest
from alembic.script import ScriptDirectory
from reliability_helpers import SQL_LOOKING, as_events
from sqlalchemy import event, text

from memupdate.agent.tools import run_tool
from memupdate.migrations.schema import alembic_config, current_revision, downgrade, head_revision, upgrade
from memupdate.store import MemoryNotFound, MemoryStore, NewMemory
from memupdate.store.database import get_engine


def test_upgrade_downgrade_upgrade_keeps_the_data(fresh_database, embedder) -> None:
    """Data written at the first revision survives every step down to it and back up to head, whatever
    the chain of revisions (downgrading to `base` drops memupdate's tables by design, so it stops at the
    first revision)."""
    chain = [r.revision for r in ScriptDirectory.from_config(alembic_config()).walk_revisions("base", "heads")][::-1]
    engine = get_engine(fresh_database)
    upgrade(engine, chain[0])
    store = MemoryStore(engine, embedder, ("locomo", "migrate"))
    store.create_many([NewMemory("Caroline moved from Sweden", metadata={"dia_ids": ["D1:3"]}, key="f0000"),
                       NewMemory("Melanie painted a lake sunrise", key="f0001")])
    store.update("f0001", content="Melanie painted a lake sunrise in 2022")
    written, events = as_events(store), [(e.op, e.memory_key) for e in store.events()]

    def unchanged() -> None:
        assert as_events(store) == written and [(e.op, e.memory_key) for e in store.events()] == events
        assert store.search("Where did Caroline move from?", top_k=1)[0].memory.key == "f0000"

    for revision in chain[1:]:
        upgrade(engine, revision)
        unchanged()
    for revision in reversed(chain[:-1]):
        downgrade(engine, revision)
        assert current_revision(engine) == revision
        unchanged()
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    unchanged()


def test_a_store_cannot_reach_another_namespace(store: MemoryStore) -> None:
    """A valid key of namespace B, used through a store scoped to A: not found, and B is untouched. Every
    statement the store sends about memories carries A's namespace as a bound parameter."""
    mine, theirs = store.scoped((*store.namespace, "a")), store.scoped((*store.namespace, "b"))
    mine.create("my own memory", key="mine", metadata={"source": "t"})
    secret = theirs.create("their secret memory", key="secret", metadata={"source": "t"})
    before = as_events(theirs)
    statements: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        for attempt in (lambda: mine.get(secret.key), lambda: mine.update(secret.key, content="stolen"),
                        lambda: mine.delete(secret.key), lambda: mine.replace([secret.key, "mine"], [])):
            with pytest.raises(MemoryNotFound):
                attempt()
        for name, args in [("delete_memory", {"memory_id": "secret"}), ("merge_memory", {"memory_ids": ["mine", "secret"]}),
                           ("manage_memory", {"action": "update", "memory_id": "secret", "content": "x"}),
                           ("split_memory", {"memory_id": "secret", "parts": ["a", "b"]})]:
            assert not run_tool(mine, name, args).ok
        assert all(hit.memory.key == "mine" for hit in mine.search("their secret memory", top_k=10))
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert as_events(theirs) == before and mine.count() == 1
    about_memories = [(s, p) for s, p in statements if "memories" in s and "pg_" not in s]
    assert about_memories
    for statement, parameters in about_memories:
        assert mine.path not in statement, "namespaces are bound, never spliced into SQL"
        values = list(parameters.values()) if isinstance(parameters, dict) else list(parameters or [])
        assert mine.path in [str(v) for v in values], f"statement not scoped to the namespace: {statement}"


@pytest.mark.parametrize("payload", SQL_LOOKING)
def test_text_is_always_a_bound_parameter(store: MemoryStore, payload: str) -> None:
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        created = run_tool(store, "manage_memory", {"action": "create", "content": f"note {payload}"})
        found = run_tool(store, "search_memory", {"query": payload})
        missing = run_tool(store, "delete_memory", {"memory_id": payload})
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert created.ok and found.ok and not missing.ok
    assert [m.content for m in store.list()] == [f"note {payload}"]
    assert statements and not any(payload in s for s in statements)


def test_the_embedded_server_listens_on_a_unix_socket_only(engine) -> None:
    if os.environ.get("MEMUPDATE_TEST_DATABASE_URL"):
        pytest.skip("the suite runs against another server, not the embedded one")
    with engine.connect() as conn:
        listen = conn.execute(text("SHOW listen_addresses")).scalar_one()
        sockets = conn.execute(text("SHOW unix_socket_directories")).scalar_one()
        client = conn.execute(text("SELECT inet_client_addr()")).scalar()
    assert listen.strip() in ("", "localhost", "127.0.0.1", "::1"), f"listens on {listen!r}"
    assert sockets and client is None, "connected over the unix socket, not TCP"
