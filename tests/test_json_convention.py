"""One --json convention (issue 55): every command's --json is a switch printing JSON (alone) to stdout;
`compact`, `eval` and `bench` write a file with --out PATH; the old `--json PATH` is refused in one line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from memupdate.cli import app
from memupdate.store import MemoryStore, NewMemory

runner = CliRunner()


@pytest.mark.parametrize("command", [["compact", "test/x"], ["eval", "--policy", "none"], ["bench", "store"],
                                     ["eval", "factconsolidation", "--file", "rows.jsonl"]])
@pytest.mark.parametrize("spelling", [["--json", "report.json"], ["--json=report.json"]])
def test_the_old_json_path_is_refused_in_one_line(command, spelling) -> None:
    result = runner.invoke(app, [*command, *spelling])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "--json takes no file: it is a switch printing JSON to stdout; write the file with --out report.json" in line


def test_a_command_without_out_says_to_redirect() -> None:
    result = runner.invoke(app, ["history", "test/x", "--json", "changes.json"])
    assert result.exit_code == 2 and result.output.strip().endswith("redirect it: --json > changes.json"), result.output


def test_compact_json_prints_the_review_alone_on_stdout_and_out_writes_it(store: MemoryStore, database_url, tmp_path) -> None:
    bank = store.scoped((*store.namespace, "alice"))
    bank.create_many([NewMemory(t, metadata={"date": "2023-05-08"}) for t in
                      ["Alice moved to Lisbon in 2021", "Alice moved to Lisbon in 2021.", "Alice adopted a cat yesterday"]])
    out = tmp_path / "review.json"
    result = runner.invoke(app, ["compact", bank.path, "--json", "--out", str(out), "--review", str(tmp_path / "r.html"),
                                 "--url", database_url])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)  # nothing but the JSON on stdout
    assert printed["bank"] == bank.path and printed["counts"]["memories_before"] == 3
    assert json.loads(out.read_text())["changes"] == printed["changes"]
    assert "--apply" in result.stderr  # the lines for a person still come, on stderr
