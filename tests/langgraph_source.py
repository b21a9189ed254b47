"""A LangGraph `PostgresStore` on the test server, in a database of its own, filled through LangMem's tools.

    with langgraph_store(fresh_database) as (url, store):
        remember(store, "alice", ["Alice moved to Lisbon in 2021", ...])   # LangMem's manage_memory, action=create
        backdate(url, keys, days=7)          # written a week earlier, as an app's older memories were
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

LANGMEM_NAMESPACE = ("memories", "{langgraph_user_id}")


@contextmanager
def langgraph_store(database_url) -> Iterator[tuple[str, object]]:
    """LangGraph's own PostgresStore on `database_url` (a SQLAlchemy URL), its tables created."""
    from langgraph.store.postgres import PostgresStore

    url = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    with PostgresStore.from_conn_string(url) as store:
        store.setup()
        yield url, store


def langmem_tool(store, action: str, user: str, **arguments) -> str:
    """Call LangMem's manage_memory tool on `store` for `user`, as an agent would."""
    from langmem import create_manage_memory_tool

    tool = create_manage_memory_tool(namespace=LANGMEM_NAMESPACE, store=store)
    return tool.invoke({"action": action, **arguments}, config={"configurable": {"langgraph_user_id": user}})


def remember(store, user: str, facts: Sequence[str]) -> list[str]:
    """Create each fact through LangMem's tool; returns the keys LangMem chose."""
    keys = []
    for fact in facts:
        reply = langmem_tool(store, "create", user, content=fact)
        keys.append(reply.rsplit(" ", 1)[-1])  # "created memory <uuid>"
    return keys


def backdate(url: str, keys: Sequence[str], *, days: float) -> None:
    """Move the write times of the items `keys` back by `days`: statements an app wrote apart in time,
    without a test waiting (writes seconds apart are one batch, which no watcher orders)."""
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("UPDATE store SET created_at = created_at - make_interval(secs => %s), "
                     "updated_at = updated_at - make_interval(secs => %s) WHERE key = ANY(%s)",
                     (days * 86400, days * 86400, list(keys)))
