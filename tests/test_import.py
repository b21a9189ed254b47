"""`memupdate data import`: LangGraph's own PostgresStore (filled through LangMem's tools), BaseStore
item dumps and plain text lines become banks with provenance; importing again is idempotent and
reports what changed at the source."""

from __future__ import annotations

import json

from langgraph_source import langgraph_store, langmem_tool, remember
from typer.testing import CliRunner

from memupdate.cli import app
from memupdate.store import MemoryStore

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_import_from_langgraph_postgres_store_is_idempotent_and_reports_source_changes(
    fresh_database, database_url, store: MemoryStore
) -> None:
    into = "/".join(store.namespace)
    with langgraph_store(fresh_database) as (url, lg):
        keys = remember(lg, "alice", ["Alice moved to Lisbon in 2021", "Alice has a dog called Rex", "Alice likes jazz"])
        remember(lg, "bob", ["Bob is allergic to nuts"])
        result = invoke("data", "import", url, "--prefix", "memories", "--into", into, "--url", database_url, "--json")
        assert result.exit_code == 0, result.output
        reports = {r["bank"]: r for r in json.loads(result.output)}
        alice = store.scoped((*store.namespace, "alice"))
        assert set(reports) == {alice.path, f"{into}/bob"} and reports[alice.path]["first_import"]
        memory = alice.get(keys[0])  # LangMem's UUID key is the memory's key
        assert memory.content == "Alice moved to Lisbon in 2021"
        origin = memory.metadata["imported_from"]
        assert origin["source"] == "langgraph" and origin["namespace"] == ["memories", "alice"] and origin["key"] == keys[0]
        assert origin["created_at"] and origin["updated_at"] and "password" not in origin["uri"]
        assert memory.metadata["date"] == origin["created_at"][:10]
        events = len(alice.events())

        again = json.loads(invoke("data", "import", url, "--prefix", "memories", "--into", into, "--url", database_url, "--json").output)
        assert [(r["unchanged"], r["created"], r["updated"]) for r in again] == [(3, [], []), (1, [], [])]
        assert len(alice.events()) == events  # nothing written

        langmem_tool(lg, "update", "alice", id=keys[1], content="Alice has two dogs, Rex and Fido")
        langmem_tool(lg, "delete", "alice", id=keys[2])
        (new_key,) = remember(lg, "alice", ["Alice works as a nurse"])
        # The prefix may name the namespace itself: --into is then the bank.
        result = invoke("data", "import", url, "--prefix", "memories/alice", "--into", alice.path, "--url", database_url)
        assert result.exit_code == 0, result.output
        assert "1 new, 1 changed, 1 removed, 1 unchanged" in result.output and keys[2] in result.output
        assert alice.get(keys[1]).content == "Alice has two dogs, Rex and Fido"
        assert alice.get(new_key).content == "Alice works as a nurse"
        assert alice.count() == 4  # removed at the source: reported, kept here


def test_a_memory_edited_here_is_never_overwritten_by_a_reimport(fresh_database, database_url, store: MemoryStore) -> None:
    into = "/".join(store.namespace)
    with langgraph_store(fresh_database) as (url, lg):
        (key,) = remember(lg, "carol", ["Carol moved to Oslo yesterday"])
        assert invoke("data", "import", url, "--prefix", "memories", "--into", into, "--url", database_url).exit_code == 0
        bank = store.scoped((*store.namespace, "carol"))
        bank.update(key, content="Carol moved to Oslo on 3 March 2024")
        langmem_tool(lg, "update", "carol", id=key, content="Carol moved to Oslo last week")
        result = invoke("data", "import", url, "--prefix", "memories", "--into", into, "--url", database_url)
        assert result.exit_code == 0 and "edited here, left alone" in result.output
        assert bank.get(key).content == "Carol moved to Oslo on 3 March 2024"


def test_import_of_item_dumps_and_text_lines(tmp_path, database_url, store: MemoryStore) -> None:
    from langgraph.store.memory import InMemoryStore

    memory = InMemoryStore()
    memory.put(("notes", "dan"), "k 1", {"content": "Dan plays chess on Sundays", "kind": "episodic", "mood": "calm"})
    memory.put(("notes", "dan"), "k2", {"content": {"fact": "Dan is 40"}})
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps([item.dict() for item in memory.search(("notes",))]))
    into = "/".join(store.namespace)
    result = invoke("data", "import", dump, "--prefix", "notes", "--into", into, "--url", database_url)
    assert result.exit_code == 0, result.output
    bank = store.scoped((*store.namespace, "dan"))
    by_content = {m.content: m for m in bank.list()}
    chess = by_content["Dan plays chess on Sundays"]
    assert chess.kind == "episodic" and chess.metadata["source_value"] == {"kind": "episodic", "mood": "calm"}
    assert chess.metadata["imported_from"]["key"] == "k 1" and chess.key != "k 1"  # a space is no memupdate key
    assert json.loads(by_content['{"fact": "Dan is 40"}'].content) == {"fact": "Dan is 40"}

    lines = tmp_path / "chat.jsonl"
    rows = [
        {"text": "Went hiking yesterday", "created_at": "2024-05-08T10:00:00", "user": "erin"},
        {"text": "Erin's sister is called Ana", "user": "erin"},
        {"text": "Frank bought a boat"},
    ]
    lines.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = invoke("data", "import", lines, "--into", into + "/chat", "--url", database_url)
    assert result.exit_code == 0, result.output
    erin = store.scoped((*store.namespace, "chat", "erin")).list()
    assert {m.content for m in erin} == {"Went hiking yesterday", "Erin's sister is called Ana"}
    assert next(m for m in erin if "hiking" in m.content).metadata["date"] == "2024-05-08"
    assert store.scoped((*store.namespace, "chat")).count() == 1  # no user: the bank itself
    again = invoke("data", "import", lines, "--into", into + "/chat", "--url", database_url)
    assert "0 new, 0 changed, 0 removed, 2 unchanged" in again.output


def test_provenance_keeps_a_source_url_without_its_password() -> None:
    from memupdate.bank.langgraph_source import langgraph_uri

    assert langgraph_uri("postgresql://app:s3cret@db:5432/app") == "postgresql://app@db:5432/app"
    # An empty password is the same source as none: importing again must not see another store.
    assert langgraph_uri("postgresql://postgres:@/app?host=/tmp/pg") == langgraph_uri("postgresql://postgres@/app?host=/tmp/pg")


def test_bad_sources_give_one_clear_line(fresh_database, database_url, tmp_path) -> None:
    with langgraph_store(fresh_database) as (url, lg):
        remember(lg, "alice", ["Alice likes jazz"])
        cases = {
            "no namespace under 'nothing'; it has: memories/alice": [url, "--prefix", "nothing"],
            "does not exist; check the URL": [url.replace(fresh_database.database, "no_such_db"), "--prefix", "memories"],
            "is neither a postgresql:// URL nor a file": [str(tmp_path / "missing.json")],
        }
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"text": "ok"}\n{"text": ""}\n')
        cases["item 2: text must be a non-empty string"] = [str(bad)]
        for expected, args in cases.items():
            result = invoke("data", "import", *args, "--url", database_url)
            assert result.exit_code == 2, result.output
            assert expected in result.output and len(result.output.strip().splitlines()) == 1, result.output
