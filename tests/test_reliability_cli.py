"""The CLI never lies or loses work (issue 10, items 4-6, 8, 9, 12-14): bad input is one line before the
run, failed runs say so and exit non-zero, Ctrl-C drops the episode's fork and exits 130, reports are
never lost. Real embedded PostgreSQL and embedding model; policies that fail or are interrupted on cue
are scripted chat models (no LLM can be downloaded here), as in test_graph.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from scripted_chat import ScriptedModel
from typer.testing import CliRunner

import memupdate.agent.policies as policies
from memupdate.cli import app
from memupdate.rl.data.locomo import load_locomo, sample_conversation_path
from memupdate.rl.evaluate import EvalConfig, evaluate
from memupdate.settings import get_settings
from memupdate.store import MemoryStore

runner = CliRunner()
MEMUPDATE = str(Path(sys.executable).parent / "memupdate")


class FailingModel(ScriptedModel):
    """Makes one real edit, then raises `error` on its next turn (a dead server, or Ctrl-C)."""

    error: BaseException = RuntimeError("Connection refused")
    turns: int = 0

    def _generate(self, *args: Any, **kwargs: Any):
        self.turns += 1
        if self.turns % 2 == 0:
            raise self.error
        return super()._generate(*args, **kwargs)


def edit_then_fail(error: BaseException) -> FailingModel:
    create = {"name": "manage_memory", "args": {"action": "create", "content": "a note [/] with [bold]brackets"},
              "id": "c1", "type": "tool_call"}
    return FailingModel(responses=[AIMessage("", tool_calls=[create])], error=error)


@pytest.fixture
def sample_file(store: MemoryStore, tmp_path) -> Path:
    """The shipped sample conversation under a sample id of this test's own, as a LoCoMo file."""
    data = json.loads(sample_conversation_path().read_text())
    data[0]["sample_id"] = f"rel-{store.namespace[-1]}"
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(data))
    yield path
    for ns in store.list_namespaces(prefix=("locomo", data[0]["sample_id"])):
        store.scoped(ns).drop()


def namespaces_under(store: MemoryStore, sample_file: Path) -> list[tuple[str, ...]]:
    sample_id = json.loads(sample_file.read_text())[0]["sample_id"]
    return store.list_namespaces(prefix=("locomo", sample_id))


def one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


# -- item 4: a policy that fails every episode ------------------------------------------------------


def test_unreachable_openai_endpoint_is_one_line_before_the_run(store, sample_file, database_url) -> None:
    result = runner.invoke(app, ["eval", "--policy", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                                 "--mode", "blind", "--locomo", str(sample_file), "--url", database_url])
    assert result.exit_code == 2
    assert "does not answer" in one_line(result.output) and "--base-url" in result.output
    assert namespaces_under(store, sample_file) == [], "nothing loaded, nothing forked"


@pytest.mark.parametrize("mode", ["targeted", "blind"])
def test_failed_episodes_are_counted_and_exit_non_zero(store, sample_file, database_url, monkeypatch, mode) -> None:
    monkeypatch.setattr(policies, "make_policy", lambda *a, **k: edit_then_fail(RuntimeError("Connection refused")))
    out = sample_file.parent / "report.json"
    result = runner.invoke(app, ["eval", "--policy", "heuristic", "--mode", mode, "--max-questions", "3",
                                 "--locomo", str(sample_file), "--url", database_url, "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "episodes failed" in result.output and "this is not a result" in result.output
    report = json.loads(out.read_text())
    episodes = 3 if mode == "targeted" else 1
    assert report["failures"] | {"share": 1.0} == {
        "episodes": episodes, "failed": episodes, "share": 1.0, "threshold": 0.1, "over_threshold": True,
    }
    assert namespaces_under(store, sample_file) == [("locomo", json.loads(sample_file.read_text())[0]["sample_id"])]


def test_a_failure_share_within_the_threshold_exits_zero(store: MemoryStore) -> None:
    conversation = load_locomo(sample_conversation_path())[0]
    from dataclasses import replace

    conversation = replace(conversation, sample_id=f"rel-{store.namespace[-1]}")
    try:
        report = evaluate(store, [conversation], None, EvalConfig(max_questions=2))
        assert report["failures"] == {"episodes": 2, "failed": 0, "share": 0.0, "threshold": 0.1, "over_threshold": False}
    finally:
        for ns in store.list_namespaces(prefix=("locomo", conversation.sample_id)):
            store.scoped(ns).drop()


# -- item 5: outputs checked before the run, never lost after ---------------------------------------


def test_json_into_a_missing_folder_is_created(sample_file, database_url) -> None:
    out = sample_file.parent / "out" / "deeper" / "eval.json"
    plot = sample_file.parent / "plots" / "eval.png"
    result = runner.invoke(app, ["eval", "--policy", "none", "--max-questions", "1", "--locomo", str(sample_file),
                                 "--url", database_url, "--out", str(out), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["questions"] == 1 and plot.stat().st_size > 1000


@pytest.mark.parametrize(
    ("option", "name", "message"),
    [("--plot", "x.txt", "must end in one of .png"), ("--out", "", "is a folder")],
)
def test_bad_output_paths_fail_before_the_run(store, sample_file, database_url, option, name, message) -> None:
    target = str(sample_file.parent / name) if name else str(sample_file.parent)
    result = runner.invoke(app, ["eval", "--policy", "none", "--locomo", str(sample_file), "--url", database_url,
                                 option, target])
    assert result.exit_code == 2 and message in one_line(result.output)
    assert namespaces_under(store, sample_file) == [], "the run never started"


# -- item 6: Ctrl-C ---------------------------------------------------------------------------------


def test_interrupt_mid_episode_drops_the_fork_and_reraises(store: MemoryStore) -> None:
    from dataclasses import replace

    conversation = replace(load_locomo(sample_conversation_path())[0], sample_id=f"rel-{store.namespace[-1]}")
    try:
        with pytest.raises(KeyboardInterrupt):
            evaluate(store, [conversation], edit_then_fail(KeyboardInterrupt()), EvalConfig(keep_forks=True))
        base = store.scoped(("locomo", conversation.sample_id))
        assert store.list_namespaces(prefix=base.namespace) == [base.namespace], "fork dropped even with keep_forks"
        assert {e.op for e in base.events()} == {"create"}, "the base is untouched"
    finally:
        for ns in store.list_namespaces(prefix=("locomo", conversation.sample_id)):
            store.scoped(ns).drop()


def test_interrupted_eval_is_one_line_and_exit_130(store, sample_file, database_url, monkeypatch) -> None:
    monkeypatch.setattr(policies, "make_policy", lambda *a, **k: edit_then_fail(KeyboardInterrupt()))
    result = runner.invoke(app, ["eval", "--policy", "heuristic", "--locomo", str(sample_file), "--url", database_url])
    assert result.exit_code == 130
    assert "interrupted" in result.output and "Traceback" not in result.output
    assert len(namespaces_under(store, sample_file)) == 1, "only the base is left"


# A real `memupdate eval` process whose policy makes one edit, then answers; on turn STALL it writes the
# marker file and waits for Ctrl-C, so the test knows the episode is under way when it sends SIGINT.
STALLING_EVAL = """
import sys, time
from pathlib import Path
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
import memupdate.agent.policies as policies
from memupdate.cli import app

MARKER, STALL = Path(sys.argv[1]), int(sys.argv[2])
CREATE = {"name": "manage_memory", "args": {"action": "create", "content": "Mid-episode note."}, "id": "c1",
          "type": "tool_call"}


class StallingModel(FakeMessagesListChatModel):
    turns: int = 0

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, *args, **kwargs):
        self.turns += 1
        if self.turns == STALL:
            MARKER.write_text(str(self.turns))
            time.sleep(60)  # Ctrl-C ends this
        return super()._generate(*args, **kwargs)


policies.make_policy = lambda *a, **k: StallingModel(responses=[AIMessage("", tool_calls=[CREATE]), AIMessage("Done.")])
app(sys.argv[3:], prog_name="memupdate")
"""


@pytest.mark.slow
@pytest.mark.parametrize("stall", [1, 2], ids=["before-any-edit", "after-an-edit"])
def test_ctrl_c_mid_episode_of_a_real_eval_process(store, sample_file, database_url, tmp_path, stall) -> None:
    """SIGINT while a real `memupdate eval` process is inside an episode (its fork exists): exit 130, one
    line, no fork left."""
    marker = tmp_path / "in-episode"
    proc = subprocess.Popen([sys.executable, "-c", STALLING_EVAL, str(marker), str(stall), "eval", "--policy", "heuristic",
                             "--locomo", str(sample_file), "--url", database_url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), f"the episode never reached turn {stall}: {proc.poll()=}"
        sample_id = json.loads(sample_file.read_text())[0]["sample_id"]
        base = store.scoped(("locomo", sample_id))
        (fork,) = [ns for ns in namespaces_under(store, sample_file) if ns != base.namespace]
        assert fork[:3] == (*base.namespace, "traj"), "the episode's fork exists when the signal is sent"
        assert store.scoped(fork).count() == base.count() + (stall - 1), "the fork holds the edits made so far"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err, err
    assert namespaces_under(store, sample_file) == [base.namespace], "only the base is left"


# -- item 8 and 9: agent run ------------------------------------------------------------------------


def test_agent_run_with_no_server_is_one_line(store, sample_file, database_url) -> None:
    assert runner.invoke(app, ["data", "load", "--locomo", str(sample_file), "--url", database_url]).exit_code == 0
    namespace = "/".join(namespaces_under(store, sample_file)[0])
    result = runner.invoke(app, ["agent", "run", "--namespace", namespace, "--policy", "openai", "--model", "m",
                                 "--base-url", "http://127.0.0.1:9/v1", "--url", database_url])
    assert result.exit_code == 2 and "does not answer" in one_line(result.output)
    assert len(namespaces_under(store, sample_file)) == 1, "no fork left behind"


def test_agent_run_failing_mid_episode_drops_its_fork(store, sample_file, database_url, monkeypatch) -> None:
    assert runner.invoke(app, ["data", "load", "--locomo", str(sample_file), "--url", database_url]).exit_code == 0
    namespace = "/".join(namespaces_under(store, sample_file)[0])
    monkeypatch.setattr(policies, "make_policy", lambda *a, **k: edit_then_fail(RuntimeError("Connection refused")))
    result = runner.invoke(app, ["agent", "run", "--namespace", namespace, "--url", database_url])
    assert result.exit_code == 2
    assert "the episode failed: RuntimeError: Connection refused" in one_line(result.output) and "dropped" in result.output
    assert len(namespaces_under(store, sample_file)) == 1, "no fork left behind"


def test_agent_run_prints_handles_and_brackets_as_they_are(store, sample_file, database_url, monkeypatch) -> None:
    assert runner.invoke(app, ["data", "load", "--locomo", str(sample_file), "--url", database_url]).exit_code == 0
    namespace = "/".join(namespaces_under(store, sample_file)[0])
    search = {"name": "search_memory", "args": {"query": "half marathon"}, "id": "s", "type": "tool_call"}
    create = {"name": "manage_memory", "args": {"action": "create", "content": "a note [/] with [bold]brackets"},
              "id": "c", "type": "tool_call"}
    script = [AIMessage("", tool_calls=[search]), AIMessage("", tool_calls=[create]), AIMessage("done [/]")]
    monkeypatch.setattr(policies, "make_policy", lambda *a, **k: ScriptedModel(responses=script))
    result = runner.invoke(app, ["agent", "run", "--namespace", namespace, "--url", database_url])
    assert result.exit_code == 0, result.output
    assert "[f00" in result.output, "memory handles are shown, not eaten as style tags"
    assert "a note [/] with [bold]brackets" in result.output and "done [/]" in result.output


# -- item 12: unknown QA category -------------------------------------------------------------------


def test_an_unknown_category_is_reported_by_number(store: MemoryStore, tmp_path) -> None:
    data = json.loads(sample_conversation_path().read_text())
    data[0]["sample_id"] = f"rel-{store.namespace[-1]}"
    data[0]["qa"][0]["category"] = 9
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data))
    try:
        report = evaluate(store, load_locomo(path), None, EvalConfig(max_questions=3))
        assert report["before"]["by_category"]["category-9"]["questions"] == 1
    finally:
        for ns in store.list_namespaces(prefix=("locomo", data[0]["sample_id"])):
            store.scoped(ns).drop()


# -- item 13: numeric options and ids checked up front ---------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [["--max-questions", "-150"], ["--max-questions", "0"], ["--max-operations", "0"], ["--max-operations", "-1"],
     ["--collateral", "-2"], ["--max-failure-share", "1.5"]],
    ids=" ".join,
)
def test_out_of_range_numbers_are_refused(sample_file, database_url, extra) -> None:
    result = runner.invoke(app, ["eval", "--policy", "none", "--locomo", str(sample_file), "--url", database_url, *extra])
    assert result.exit_code == 2 and "Invalid value" in result.output


def test_demo_questions_must_be_positive(database_url) -> None:
    result = runner.invoke(app, ["demo", "--questions", "0", "--url", database_url])
    assert result.exit_code == 2 and "Invalid value" in result.output


def test_conversations_naming_nothing_is_an_error(sample_file, database_url) -> None:
    result = runner.invoke(app, ["eval", "--policy", "none", "--locomo", str(sample_file), "--conversations", ",,"])
    assert result.exit_code == 2 and "names no conversation" in one_line(result.output)


def test_a_sample_id_too_long_for_fork_labels_is_refused_up_front(store, tmp_path, database_url) -> None:
    data = json.loads(sample_conversation_path().read_text())
    data[0]["sample_id"] = "c" * 60
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data))
    result = runner.invoke(app, ["eval", "--policy", "none", "--locomo", str(path), "--url", database_url])
    assert result.exit_code == 2
    line = one_line(result.output)
    assert "60 characters" in line and "at most" in line and "rename sample_id" in line
    assert store.list_namespaces(prefix=("locomo", "c" * 60)) == []


# -- item 14: smaller ones --------------------------------------------------------------------------


def test_long_errors_are_not_hard_wrapped() -> None:
    url = "postgresql://someone@127.0.0.1:1/" + "a_rather_long_database_name_" * 3
    result = runner.invoke(app, ["db", "status", "--url", url])
    assert result.exit_code == 2
    assert url.split("//")[1].split("@")[1] in one_line(result.output), "one line, whatever its length"


def test_database_errors_name_the_variable_actually_used(monkeypatch) -> None:
    bad = "postgresql://nobody@127.0.0.1:1/none"
    result = runner.invoke(app, ["db", "status", "--url", bad])
    assert "Fix the URL given (--url)" in result.output and "MEMUPDATE_DATABASE_URL" not in result.output
    for variable, other in (("DATABASE_URL", "MEMUPDATE_DATABASE_URL"), ("MEMUPDATE_DATABASE_URL", "DATABASE_URL")):
        monkeypatch.delenv(other, raising=False)
        monkeypatch.setenv(variable, bad)
        get_settings.cache_clear()
        try:
            result = runner.invoke(app, ["db", "status"])
        finally:
            monkeypatch.delenv(variable)
            get_settings.cache_clear()
        assert result.exit_code == 2 and f"Fix {variable}, or unset it" in one_line(result.output)


def test_demo_conversations_without_locomo_is_an_error() -> None:
    result = runner.invoke(app, ["demo", "--conversations", "conv-26"])
    assert result.exit_code == 2 and "add --locomo FILE" in one_line(result.output)


@pytest.mark.parametrize("command", [["eval"], ["agent", "run"]])
def test_seed_has_help(command) -> None:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    line = next(line for line in result.output.splitlines() if "--seed" in line)
    assert "Seed of the policy" in line


def test_db_status_shows_the_whole_url_with_the_password_hidden(database_url) -> None:
    from sqlalchemy.engine import make_url

    with_password = make_url(database_url).set(password="s3cret-and-quite-long-password")
    result = runner.invoke(app, ["db", "status", "--url", with_password.render_as_string(hide_password=False)])
    shown = with_password.set(drivername="postgresql+psycopg").render_as_string(hide_password=True)
    assert result.exit_code == 0, result.output
    assert f"url: {shown}" in result.output and "s3cret" not in result.output


def test_no_loading_weights_bar() -> None:
    """Loading the embedding model under the CLI prints no library progress bar (a fresh process: the
    variables that silence it are read when transformers is first imported)."""
    script = "import memupdate.cli.common; from memupdate.store.embeddings import get_embedder; get_embedder().embed(['x'])"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180,
                            env={**os.environ, "COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    assert "Loading weights" not in result.stderr and "it/s" not in result.stderr
