"""`memupdate demo` shows the main job first (issue 55): the sample bank compacted (a relative date fixed,
a changed fact superseded, both copies of it where it was told twice), one HTML review, applied and undone, QA before ->
after; then the training task. Every line fits an 80-column terminal."""

from __future__ import annotations

import time

from rich.cells import cell_len
from typer.testing import CliRunner

from memupdate.cli import app
from memupdate.rl.data.locomo import load_sample
from memupdate.store import MemoryStore

runner = CliRunner()


def test_the_demo_compacts_reviews_applies_and_undoes_first(store: MemoryStore, database_url, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    result = runner.invoke(app, ["demo", "--url", database_url, "--questions", "2"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 120
    out = result.stdout
    main_job, training = out.index("1. the main job: compact a memory bank"), out.index("2. the training task")
    assert main_job < training
    first = " ".join(out[main_job:training].split())
    for shown in ("update (a relative date fixed): - Nadia ran her first 10k race", "(2 March 2024)",
                  "supersede (a fact that changed: the older kept as history): - ", " superseded by: ",
                  "QA proxy on", "review page (one static HTML file): out/demo-review.html", "applied change", "undone"):
        assert shown in first, shown
    assert first.count("superseded by: Owen no longer teaches chemistry") == 1 and "2 supersedes" in first  # both copies
    assert (tmp_path / "out" / "demo-review.html").read_text().count("<article") >= 3
    assert all(cell_len(line) <= 80 for line in out.splitlines()), [line for line in out.splitlines() if cell_len(line) > 80]

    conversation = load_sample()[0]
    bank = store.scoped(("demo", conversation.sample_id))
    base = store.scoped(("locomo", conversation.sample_id))
    assert bank.count() == len(conversation.facts) + 2  # undone: the copy holds what it held before the compaction
    assert base.count() == len(conversation.facts)  # the shipped sample's bank is never written
