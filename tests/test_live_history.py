"""What the watcher did, told truly and undone truly (issue 55), on real parts: LangGraph's own
PostgresStore in a database of its own on the test server, written through LangMem's tool, the embedded
PostgreSQL, the packaged embedding model and the heuristic policy."""

from __future__ import annotations

import json
from typing import Any

from langgraph_source import backdate, langgraph_store, langmem_tool, remember
from typer.testing import CliRunner

from memupdate.agent.background import BackgroundCompactor, CompactorSettings
from memupdate.agent.safety import SafetyRule
from memupdate.bank.change_log import history
from memupdate.cli import app
from memupdate.store import MemoryStore, NewMemory

runner = CliRunner()
FACTS = [
    "Alice moved to Lisbon in 2021",
    "Alice moved to Lisbon in 2021.",
    "Alice has a dog called Rex",
    "Alice works as a nurse at the city hospital",
]


def invoke(*args: Any, code: int = 0) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result.output


def one_line_error(*args: Any) -> str:
    output = invoke(*args, code=2)
    assert len(output.strip().splitlines()) == 1 and "Traceback" not in output, output
    return output


def forget_compactions(bank: MemoryStore) -> None:
    """As if the bank was never compacted: the next pass compacts it again."""
    from sqlalchemy import delete

    from memupdate.store.statements import events

    with bank.engine.begin() as conn:
        conn.execute(delete(events).where(events.c.namespace == bank.path, events.c.op == "compacted"))


def squeezed(text: str) -> str:
    return "".join(text.split())


def column(table: str, number: int) -> str:
    """The text of a rich table's column (1: the first), its cells' lines joined, without spaces (a long
    key folds mid-word)."""
    return squeezed("".join(line.split("│")[number] for line in table.splitlines() if line.count("│") > number))


def held(lg, user: str = "alice") -> dict[str, str]:
    return {item.key: item.value["content"] for item in lg.search(("memories", user), limit=100)}


def test_review_under_a_path_with_no_bank_says_so(store: MemoryStore, database_url) -> None:
    bank = store.scoped((*store.namespace, "alice"))
    bank.create("Alice likes jazz")
    typo = "/".join(store.namespace) + "x"
    output = one_line_error("review", "--under", typo, "--url", database_url)
    assert f"--under {typo!r}: no bank is at or under that path" in output and bank.path in output
    assert "0 changes wait for review" in invoke("review", "--under", "/".join(store.namespace), "--url", database_url)
    assert "0 changes wait for review" in invoke("review", "--under", bank.path, "--url", database_url)


def test_undo_of_a_merge_whose_item_the_app_deleted_names_the_apps_key(fresh_database, database_url, store: MemoryStore) -> None:
    with langgraph_store(fresh_database) as (url, lg):
        remember(lg, "alice", FACTS)
        compactor = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace))
        compactor.run_once()
        bank = store.scoped((*store.namespace, "alice"))
        merge = next(c for c in history(bank) if c.status == "applied" and c.details["review_change"]["kind"] == "merge")
        (merged_key,) = [k for k, text in held(lg).items() if text in FACTS[:2]]  # the merge's item
        (memory,) = [m for m in bank.list() if m.content == held(lg)[merged_key]]
        langmem_tool(lg, "delete", "alice", id=merged_key)
        compactor.run_once()  # imports the app's deletion
        output = one_line_error("undo", bank.path, "--change", merge.id, "--url", database_url)
        assert f"the app deleted its item {merged_key!r}" in output and f"change {merge.id}" in output, output
        if memory.key != merged_key:  # the bank's own key may be shown beside the app's, never alone
            assert output.index(merged_key) < output.index(memory.key)
        assert "changed" not in output
        assert next(c for c in history(bank) if c.id == merge.id).status == "applied"  # nothing undone


COLOURS = [
    NewMemory("Alice's favourite colour is blue", metadata={"time": "2024-03-01T09:00:00"}),
    NewMemory("Alice works as a nurse at the city hospital", metadata={"time": "2024-03-02T10:00:00"}),
    NewMemory("Alice's favourite colour is green", metadata={"time": "2024-06-02T18:30:00"}),
]


def test_history_and_review_show_what_superseded_what_with_both_times(store: MemoryStore, database_url) -> None:
    bank = store.scoped((*store.namespace, "alice"))
    bank.create_many(COLOURS)
    (done,) = BackgroundCompactor(store, bank.path).run_once()
    (change,) = [c for c in history(bank) if c.details["review_change"]["kind"] == "supersede"]
    stale = "[{}] Alice's favourite colour is blue (stated 2024-03-01 09:00:00)"
    newer = "[{}] Alice's favourite colour is green (stated 2024-06-02 18:30:00)"
    (edit,) = json.loads(invoke("history", bank.path, "--change", change.id, "--json", "--url", database_url))["edits"]
    (pair,) = edit["superseded_by"]
    assert pair["stale"]["content"] == "Alice's favourite colour is blue" and pair["stale"]["stated_at"] == "2024-03-01 09:00:00"
    assert pair["newer"]["content"] == "Alice's favourite colour is green" and pair["newer"]["stated_at"] == "2024-06-02 18:30:00"
    shown = invoke("history", bank.path, "--change", change.id, "--url", database_url)
    assert squeezed(stale.format(pair["stale"]["key"])) in column(shown, 2)
    assert squeezed("superseded by " + newer.format(pair["newer"]["key"])) in column(shown, 3)

    if change.status == "applied":  # the watcher applied it: undo it, and ask for it in review instead
        invoke("undo", bank.path, "--change", change.id, "--url", database_url)
        compactor = BackgroundCompactor(store, bank.path, CompactorSettings(rule=SafetyRule.review_everything()))
        bank.update(pair["stale"]["key"], content="Alice's favourite colour is blue!")  # a source changed: proposed anew
        forget_compactions(bank)
        compactor.run_once()
    (pending,) = json.loads(invoke("review", "--under", bank.path, "--json", "--url", database_url))["pending"]
    (queued,) = pending["superseded_by"]
    assert queued["newer"] == {"key": pair["newer"]["key"], "content": "Alice's favourite colour is green", "stated_at": "2024-06-02 18:30:00"}
    assert queued["stale"]["stated_at"] == "2024-03-01 09:00:00"
    listing = invoke("review", "--under", bank.path, "--url", database_url)
    assert squeezed(f"{stale.format(pair['stale']['key']).replace('blue', 'blue!')} -> superseded by {newer.format(pair['newer']['key'])}") in column(listing, 3)


def test_an_undone_supersession_restores_the_stale_item_with_its_first_times(fresh_database, database_url, store: MemoryStore) -> None:
    """Undo put the stale item back stamped now, so a re-import read it as the newest statement and
    proposed retiring the current one. The restored item keeps the times the app first gave it."""
    with langgraph_store(fresh_database) as (url, lg):
        (blue,) = remember(lg, "alice", ["Alice's favourite colour is blue"])
        backdate(url, [blue], days=1)  # a day before the green (one batch of writes is not ordered)
        (green,) = remember(lg, "alice", ["Alice's favourite colour is green"])
        remember(lg, "alice", FACTS[2:])
        first = lg.get(("memories", "alice"), blue)
        compactor = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace))
        compactor.run_once()
        bank = store.scoped((*store.namespace, "alice"))
        (change,) = [c for c in history(bank) if c.details["review_change"]["kind"] == "supersede"]
        assert change.status == "applied" and blue not in held(lg)
        invoke("undo", bank.path, "--change", change.id, "--url", database_url)
        restored = lg.get(("memories", "alice"), blue)
        assert restored.value["content"] == "Alice's favourite colour is blue"
        assert (restored.created_at, restored.updated_at) == (first.created_at, first.updated_at)

        forget_compactions(bank)
        again = compactor.run_once()[0]  # the same bank: the undone change is known, nothing else comes
        assert again.applied == [] and again.queued == []

        into = (*store.namespace, "again")
        invoke("data", "import", url, "--prefix", "memories", "--into", "/".join(into), "--url", database_url)
        fresh = store.scoped((*into, "alice"))
        assert {m.key: m.metadata["imported_from"]["created_at"] for m in fresh.list()}[blue] == first.created_at.isoformat()
        BackgroundCompactor(store, fresh.path, CompactorSettings(rule=SafetyRule.review_everything())).run_once()
        retired = [s["key"] for c in history(fresh) for s in c.details["review_change"]["sources"]
                   if c.details["review_change"]["kind"] == "supersede"]
        assert green not in retired and retired == [blue]  # the current statement stays current


def test_a_merge_keeps_the_app_key_of_its_newest_source(fresh_database, database_url, store: MemoryStore) -> None:
    """A merge wrote a new key and deleted both originals: an app holding either got "not found". The
    merged item takes the key of its newest source, says so, and an undo gives each source its key back."""
    with langgraph_store(fresh_database) as (url, lg):
        older, newer = remember(lg, "alice", FACTS[:2])
        remember(lg, "alice", FACTS[2:])
        born = lg.get(("memories", "alice"), newer).created_at
        compactor = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace))
        (done,) = compactor.run_once()
        bank = store.scoped((*store.namespace, "alice"))
        merge = next(c for c in history(bank) if c.details["review_change"]["kind"] == "merge")
        assert merge.status == "applied" and older not in held(lg)
        item = lg.get(("memories", "alice"), newer)
        assert item.value["content"] in FACTS[:2] and item.created_at == born  # updated in place, not re-created
        assert f"merged item kept the app's key of its newest source: {newer}" in done.summary()
        (memory,) = [m.key for m in bank.list() if m.content == item.value["content"]]
        assert next(c for c in history(bank) if c.id == merge.id).summary["app_keys"] == {memory: newer}
        shown = invoke("history", bank.path, "--change", merge.id, "--url", database_url)
        assert f"merged memory {memory} is the app's item {newer} (the key of its newest source)" in " ".join(shown.split())
        invoke("undo", bank.path, "--change", merge.id, "--url", database_url)
        assert {k: held(lg)[k] for k in (older, newer)} == {older: FACTS[0], newer: FACTS[1]}
        assert sorted(m.content for m in bank.list()) == sorted(held(lg).values())
