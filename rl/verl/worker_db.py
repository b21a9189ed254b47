"""The database of a Ray worker process (agent loop or reward): one store, one small pool, one thread pool.

    from memupdate.rl.verl.worker_db import in_db_thread, worker_store

    root = worker_store()                                  # MEMUPDATE_DATABASE_URL, WORKER_CONNECTIONS connections
    count = await in_db_thread(root.scoped("locomo/conv-26").count)

verl runs many rollouts per process on one event loop: database work goes to a small thread pool
of `WORKER_CONNECTIONS` threads over a pool of as many connections, so one agent-loop or reward
worker process holds at most `WORKER_CONNECTIONS` PostgreSQL connections.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from memupdate.store import DatabaseError, MemoryStore

T = TypeVar("T")

# Connections (and database threads) per agent-loop or reward worker process.
WORKER_CONNECTIONS = 4

_worker_store: MemoryStore | None = None
_executor: ThreadPoolExecutor | None = None


def worker_store() -> MemoryStore:
    """This process's root store: the configured database (MEMUPDATE_DATABASE_URL, which `memupdate rl
    train` puts in every Ray worker's environment) with a pool of `WORKER_CONNECTIONS` connections."""
    global _worker_store
    if _worker_store is None:
        from sqlalchemy import create_engine, text

        from memupdate.store import get_embedder, resolve_url

        url = resolve_url()
        # synchronous_commit=off: a rollout writes only its own throwaway fork, so a crash losing its last
        # few writes costs nothing, while waiting for every commit's WAL flush slows each tool call.
        engine = create_engine(
            url,
            pool_size=WORKER_CONNECTIONS,
            max_overflow=0,  # no pre-ping: the store reconnects on error (`store.database.retrying`)
            connect_args={"connect_timeout": 5, "options": "-c synchronous_commit=off"},
        )
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:
            engine.dispose()
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise DatabaseError(
                f"this rollout worker cannot reach PostgreSQL at {url.render_as_string(hide_password=True)}: {reason}. "
                "Every Ray worker reads MEMUPDATE_DATABASE_URL from its runtime env (set by `memupdate rl train`); "
                "make the server reachable from every node, or fix the URL"
            ) from None
        _worker_store = MemoryStore(engine, get_embedder(), ("memupdate",))
    return _worker_store


def use_worker_store(store: MemoryStore | None) -> None:
    """Make `store` this process's root store (tests and benchmarks bring their own engine); None resets."""
    global _worker_store
    _worker_store = store


async def in_db_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run `fn(*args)` on the process's database threads (never more than `WORKER_CONNECTIONS` at once),
    so rollouts waiting for the database queue on the event loop, not in verl's default executor."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(WORKER_CONNECTIONS, thread_name_prefix="memupdate-db")
    return await asyncio.get_running_loop().run_in_executor(_executor, functools.partial(fn, *args))
