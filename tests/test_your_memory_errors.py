"""Bad input on the import -> compact -> apply -> export -> undo path: a mistyped bank name and a wrong
LangGraph URL each give one line naming the thing and the fix, and nothing is written anywhere."""

from __future__ import annotations

from langgraph_source import langgraph_store, remember
from typer.testing import CliRunner

from memupdate.bank.namespaces import bank_exists
from memupdate.bank.sources import read_source
from memupdate.cli import app
from memupdate.store import MemoryStore

runner = CliRunner()


def one_line_error(*args: str) -> str:
    """Run a command that must refuse: exit code 2 and a single line of output, which is returned."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    return result.output


def test_a_namespace_that_does_not_exist_is_one_line_naming_the_nearest_bank(store: MemoryStore, database_url) -> None:
    bank = store.scoped((*store.namespace, "alice"))
    bank.create("Alice likes jazz")
    typo = bank.path + "x"
    commands = [
        ["compact", typo], ["compact", typo, "--apply"], ["compact", typo, "--discard"],
        ["history", typo], ["undo", typo], ["undo", typo, "--to", "0"], ["data", "export", typo],
    ]
    for command in commands:
        output = one_line_error(*command, "--url", database_url)
        assert f"namespace {typo!r} does not exist" in output and f"did you mean {bank.path}" in output, (command, output)
    assert not bank_exists(bank.engine, typo)  # nothing was forked, proposed or recorded under the typo
    assert [m.content for m in bank.list()] == ["Alice likes jazz"]


def test_export_to_a_wrong_url_is_one_line_and_writes_nothing(fresh_database, database_url, store: MemoryStore) -> None:
    into = "/".join(store.namespace)
    bank = store.scoped((*store.namespace, "alice"))
    with langgraph_store(fresh_database) as (url, lg):
        keys = remember(lg, "alice", ["Alice moved to Lisbon in 2021", "Alice has a dog called Rex"])
        assert runner.invoke(app, ["data", "import", url, "--prefix", "memories", "--into", into, "--url", database_url]).exit_code == 0
        bank.update(keys[0], content="Alice moved to Lisbon in May 2021")  # a change the export would write
        state = read_source(bank)
        wrong = {
            "cannot connect to LangGraph store": url.replace(fresh_database.database, "no_such_db"),
            "Connection refused": "postgresql://app@127.0.0.1:1/app",
            "is not a database URL": "not a url",
            "is not a PostgreSQL URL": "mysql://app@localhost/app",
        }
        for expected, source_url in wrong.items():
            output = one_line_error("data", "export", bank.path, "--apply", "--source-url", source_url, "--url", database_url)
            assert expected in output and "URL" in output, output
        assert read_source(bank) == state  # the bank's record of its source is as the import left it
        held = {item.key: item.value["content"] for item in lg.search(("memories", "alice"))}
        assert held == {keys[0]: "Alice moved to Lisbon in 2021", keys[1]: "Alice has a dog called Rex"}

        output = runner.invoke(app, ["data", "export", bank.path, "--source-url", url, "--url", database_url]).output
        assert "0 new and 1 changed items written" in output  # the right URL then writes the change
