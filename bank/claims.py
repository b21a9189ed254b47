"""One worker at a time on a bank: any number of `memupdate watch` workers against one database share
a pass, each bank worked on by the worker that claims it while the others skip it.

    from memupdate.bank.claims import claim

    with claim(engine, "app/memories/alice") as held:
        if held:
            ...        # this worker's until the block ends
        else:
            ...        # another worker holds it now: skip it (it is being done)
    with claim_many(engine, ["app/memories/alice", "app/memories/bo"]) as held:
        ...            # the names this worker holds (a set): a batch of banks claimed in one query

A claim is a row lock on the name's row of `watch_claims` (`SELECT ... FOR UPDATE SKIP LOCKED`), held
by a transaction open for the block on a connection of its own: it ends with the block, and PostgreSQL
ends it when the worker's connection dies, so a killed worker holds nothing and leaves the bank to the
next pass. Rows, not `pg_try_advisory_lock` on a hash of the path: a row names one bank exactly (two
banks of a million never share a lock), and no key is shared with advisory locks the app may take on
the same database. The table holds no state: a row is added the first time its name is claimed.
(A server with `idle_in_transaction_session_timeout` shorter than a bank's compaction would end a claim
early: leave it unset, or above the longest compaction, for the watcher's role.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, select
from sqlalchemy.dialects.postgresql import insert

from memupdate.bank.models import WatchClaim

claims = WatchClaim.__table__


@contextmanager
def claim(engine: Engine, name: str) -> Iterator[bool]:
    """Hold `name` (a bank's path, or any name workers agree on) for the block: yields True when this
    worker holds it, False when another does."""
    with engine.connect() as conn, conn.begin():
        held = _lock(conn, name)
        if not held and conn.execute(select(claims.c.name).where(claims.c.name == name)).first() is None:
            # A name never claimed: its row added and committed apart, so an insert never waits on a holder.
            with engine.begin() as other:
                other.execute(insert(claims).values(name=name).on_conflict_do_nothing())
            held = _lock(conn, name)
        yield held


def _lock(conn: Connection, name: str) -> bool:
    query = select(claims.c.name).where(claims.c.name == name).with_for_update(skip_locked=True)
    return conn.execute(query).first() is not None


@contextmanager
def claim_many(engine: Engine, names: Sequence[str]) -> Iterator[set[str]]:
    """Hold, for the block, those of `names` no other worker holds (yields them): a batch of banks claimed
    in one query, so a worker can read all of their pairs in one batch and the others skip the batch."""
    if not names:
        yield set()
        return
    with engine.begin() as other:  # rows for names never claimed, committed apart (an insert never waits on a holder)
        other.execute(insert(claims).values([{"name": name} for name in names]).on_conflict_do_nothing())
    with engine.connect() as conn, conn.begin():
        query = select(claims.c.name).where(claims.c.name.in_(list(names))).with_for_update(skip_locked=True)
        yield {row[0] for row in conn.execute(query)}
