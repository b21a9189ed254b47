"""What the watcher did, told truly and undone truly (issue 55), on real parts: LangGraph's own
PostgresStore in a database of its own on the test server, written through LangMem's tool, the embedded
PostgreSQL, the packaged embedding model and the heuristic policy."""

from __future__ import annotations

import json
from typing import Any

from langgraph_source import langgraph_store, langmem_tool, remember
from typer.testing import CliRunner

from memupdate.agent.background import BackgroundCompactor
from memupdate.bank.change_log import history
from memupdate.cli import app
from memupdate.store import MemoryStore

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
        compactor = BackgroundCompactor(store, url, prefix=("memories",), into=store.namespace)
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
