"""The LangMem user's round trip, on real parts: LangGraph's own PostgresStore (on the test server, a
database of its own) filled through LangMem's tools -> `data import` -> `compact` -> `--apply` ->
`data export` -> read back with LangGraph -> `undo`."""

from __future__ import annotations

import json
import uuid

from langgraph_source import langgraph_store, langmem_tool, remember
from sqlalchemy import select, text
from typer.testing import CliRunner

from memupdate.bank.sources import store_key
from memupdate.cli import app
from memupdate.store import MemoryStore
from memupdate.store.statements import memories

runner = CliRunner()
FACTS = [
    "Alice moved to Lisbon in 2021",
    "Alice moved to Lisbon in 2021.",
    "Alice has a dog called Rex",
    "Alice adopted a cat named Mia yesterday",
    "Alice works as a nurse at the city hospital",
]


def invoke(*args: str) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def rows(bank: MemoryStore) -> list[tuple]:
    with bank.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(memories.c.id, memories.c.key, memories.c.content, memories.c.metadata, text("embedding::text"),
                   memories.c.seq, memories.c.created_at, memories.c.updated_at)
            .where(memories.c.namespace == bank.path).order_by(memories.c.seq))]


def test_import_compact_apply_export_read_back_undo(fresh_database, database_url, store: MemoryStore, tmp_path) -> None:
    into = "/".join(store.namespace)
    bank = store.scoped((*store.namespace, "alice"))
    with langgraph_store(fresh_database) as (url, lg):
        keys = dict(zip(FACTS, remember(lg, "alice", FACTS), strict=True))
        invoke("data", "import", url, "--prefix", "memories", "--into", into, "--url", database_url)
        before_apply = rows(bank)

        page, data = tmp_path / "review.html", tmp_path / "review.json"
        invoke("compact", bank.path, "--review", page, "--out", data, "--url", database_url)
        review = json.loads(data.read_text())
        kinds = {c["kind"]: c for c in review["changes"]}
        assert set(kinds) == {"merge", "update"}
        assert {s["key"] for s in kinds["merge"]["sources"]} == {keys[FACTS[0]], keys[FACTS[1]]}
        assert kinds["update"]["sources"][0]["key"] == keys[FACTS[3]] and "(" in kinds["update"]["results"][0]["content"]
        assert review["counts"]["flagged"] == 0

        output = invoke("compact", bank.path, "--apply", "--url", database_url)
        assert "memories 5 -> 4" in output
        merged = store_key(bank.path, kinds["merge"]["results"][0]["key"])  # written under a UUID, as LangMem's tools need
        assert str(uuid.UUID(merged)) == merged

        # Meanwhile the app itself rewrites the memory the compaction anchored: the export must leave it alone.
        langmem_tool(lg, "update", "alice", id=keys[FACTS[3]], content="Alice adopted a cat named Mia and a hamster")
        report = json.loads(invoke("data", "export", bank.path, "--json", "--url", database_url))
        assert report["written_new"] == [merged] and report["written_changed"] == []
        assert report["changed_at_source"] == [keys[FACTS[3]]]
        assert sorted(report["to_delete"]) == sorted([keys[FACTS[0]], keys[FACTS[1]]]) and report["deleted"] == []
        held = {item.key: item.value for item in lg.search(("memories", "alice"), limit=50)}
        assert len(held) == 6 and held[merged]["content"] in (FACTS[0], FACTS[1])
        assert held[keys[FACTS[3]]]["content"] == "Alice adopted a cat named Mia and a hamster"

        report = json.loads(invoke("data", "export", bank.path, "--apply", "--json", "--url", database_url))
        assert sorted(report["deleted"]) == sorted([keys[FACTS[0]], keys[FACTS[1]]])
        held = {item.key: item.value["content"] for item in lg.search(("memories", "alice"), limit=50)}
        expected = {store_key(bank.path, m.key, m.metadata): m.content for m in bank.list()}
        expected |= {keys[FACTS[3]]: "Alice adopted a cat named Mia and a hamster"}
        assert held == expected  # read back with LangGraph: the bank, but for the item changed at the source
        again = json.loads(invoke("data", "export", bank.path, "--apply", "--json", "--url", database_url))
        assert again["written_new"] == again["written_changed"] == again["deleted"] == []

        invoke("undo", bank.path, "--url", database_url)
        assert rows(bank) == before_apply  # the bank as imported, embeddings included
