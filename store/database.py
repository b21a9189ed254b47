"""Connecting to PostgreSQL: a configured server, or the embedded one (`memupdate.store.embedded`).

    from memupdate.store.database import get_engine
    engine = get_engine()                       # MEMUPDATE_DATABASE_URL / DATABASE_URL, else embedded
    engine = get_engine("postgresql://u:p@db:5432/mem")

The embedded server (PostgreSQL 18 + pgvector 0.8) lives in `<data_dir>/pg`; it starts on first use (or
is reused when another process already runs it) and stops when the last process using it exits. The
server package keeps a lock-guarded list of the processes holding it, so two processes can share it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from memupdate.settings import database_url_origin, get_settings
from memupdate.store.errors import DatabaseError

log = logging.getLogger(__name__)
T = TypeVar("T")
URL_HINT = "expected postgresql://user:password@host:5432/dbname"


def normalize_url(url: str) -> URL:
    """Parse a PostgreSQL URL and select the psycopg 3 driver; raise DatabaseError on anything else."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise DatabaseError(f"database URL {url!r} is not a URL ({URL_HINT})") from None
    if parsed.get_backend_name() not in ("postgresql", "postgres"):
        raise DatabaseError(
            f"database URL {parsed.render_as_string(hide_password=True)!r} is not PostgreSQL ({URL_HINT}); "
            "memupdate needs PostgreSQL with pgvector, or unset the URL to use the embedded server"
        )
    return parsed.set(drivername="postgresql+psycopg")


def resolve_url(url: str | URL | None = None) -> URL:
    """The URL to use: the argument, else the settings, else the embedded server's."""
    if isinstance(url, URL):
        return url
    url = url or get_settings().database_url
    if url:
        return normalize_url(url)
    from memupdate.store.embedded import start_embedded_server

    return start_embedded_server()


def url_origin(url: str | URL | None) -> str:
    """What a user changes to fix the URL `get_engine(url)` used: the argument (the CLI's `--url`), or
    the variable the settings read it from (`MEMUPDATE_DATABASE_URL` or `DATABASE_URL`)."""
    return "the URL given (--url)" if url else database_url_origin()


@lru_cache(maxsize=8)
def _engine_for(url: URL) -> Engine:
    # No pool pre-ping: it costs a round trip per checkout; the store retries a dead pooled connection
    # instead (`retrying`), and a disconnect invalidates the whole pool, so the next checkout reconnects.
    return create_engine(url, pool_size=8, max_overflow=8, connect_args={"connect_timeout": 5})


def retrying(connect: Callable[[], Any], work: Callable[[Connection], T], *, retry: bool = True) -> T:
    """`work(conn)` on `connect()`'s connection, once more on a fresh one when the pooled connection
    turns out dead (the server restarted or dropped it) before `work` finished: what a pool pre-ping
    did, without its round trip on every checkout.

        rows = retrying(engine.connect, lambda conn: conn.execute(query).all())

    Pass `retry=False` for work whose first statements may have run before the connection broke (a
    transaction of several statements): its error then reaches the caller. A failure after `work`
    returned (its COMMIT) is never retried: the write may have landed.
    """
    for attempt in (1, 2):
        finished = False
        try:
            with connect() as conn:
                result = work(conn)
                finished = True
            return result
        except DBAPIError as exc:
            if finished or not retry or attempt == 2 or not exc.connection_invalidated:
                raise
    raise AssertionError("unreachable")


def get_engine(url: str | URL | None = None) -> Engine:
    """A pooled engine for `url` (see `resolve_url`), checked to be reachable; one per URL per process."""
    engine = _engine_for(resolve_url(url))
    try:
        retrying(engine.connect, lambda conn: conn.execute(text("SELECT 1")))
    except OperationalError as exc:
        _engine_for.cache_clear()
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        origin = url_origin(url)
        fix = f"fix {origin}" + ("" if origin.startswith("the embedded") else ", or unset it to use the embedded server")
        raise DatabaseError(
            f"cannot connect to PostgreSQL at {engine.url.render_as_string(hide_password=True)}: {reason}. "
            f"Is the server running and the URL right? {fix[0].upper()}{fix[1:]}"
        ) from None
    return engine


def server_info(engine: Engine) -> dict[str, str | None]:
    """PostgreSQL version, installed pgvector version (None if absent) and whether pgvector is available."""
    with engine.connect() as conn:
        version = conn.execute(text("SHOW server_version")).scalar_one()
        installed = conn.execute(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
        available = conn.execute(
            text("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
        ).scalar()
    return {"server_version": version, "pgvector_version": installed, "pgvector_available": available}


def require_pgvector(engine: Engine, url: str | URL | None = None) -> None:
    """Raise DatabaseError naming the fix when the server cannot provide the `vector` extension (`url`:
    what the caller passed to `get_engine`, to name where the URL came from)."""
    info = server_info(engine)
    if info["pgvector_version"] is None and info["pgvector_available"] is None:
        raise DatabaseError(
            f"PostgreSQL {info['server_version']} at {engine.url.render_as_string(hide_password=True)} has no "
            "pgvector extension: install pgvector on that server (https://github.com/pgvector/pgvector), "
            f"or unset {url_origin(url)} to use the embedded server, which bundles it"
        )
