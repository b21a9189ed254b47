"""The examples a reader meets first are true: every module docstring's indented example and the README's
"A tour in Python".

A docstring example is an indented block of the module's docstring, cut at blank lines into paragraphs:
`>>>` paragraphs are doctests and run; a paragraph that begins with a command (`memupdate`, `python -m`,
`make`) is a shell line, whose command, subcommands and options must exist (an old `--json PATH` is refused
as the command line refuses it); every other paragraph is Python: it must compile, and every name it
imports from the package must exist. The examples in `RUNS` also run, on the embedded test database,
with `store`, `bank` (a bank of three memories), `fork` (a fork of it, one memory edited) and `engine`
given, in a temporary folder; the rest need what a test cannot have here (a served endpoint,
a GPU, verl's trainer, LoCoMo, a trained run's folder) or name values the prose around them describes.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import importlib
import io
import re
import shlex
from pathlib import Path

import pytest
import typer
from test_layers import REPO, modules

from memupdate.cli import app
from memupdate.cli.common import old_json_path
from memupdate.store import MemoryStore, NewMemory

# Blocks that are neither Python nor a command line: a chat format, verl's YAML, the reward's formula.
NOT_CODE = {"memupdate.llm.hermes", "memupdate.rl.verl.compute_score", "memupdate.scoring.reward"}
COMMANDS = ("memupdate", "python", "make", "langgraph")
# Modules whose docstring example runs as written, given `store`, `bank`, `fork` and `engine`.
RUNS = [
    "memupdate.agent.tools",
    "memupdate.bank.change_log",
    "memupdate.bank.file_source",
    "memupdate.bank.namespaces",
    "memupdate.bank.sources",
    "memupdate.judge.decision",
    "memupdate.migrations.models",
    "memupdate.migrations.schema",
    "memupdate.rl.data.namespaces",
    "memupdate.rl.leftover_forks",
    "memupdate.rl.distill.advantages",
    "memupdate.rl.distill.config",
    "memupdate.scoring.categories",
    "memupdate.scoring.llm_cache",
    "memupdate.scoring.metrics",
]
# Examples that run but load a model: with `-m slow`.
RUNS_SLOW = ["memupdate.judge.verdict"]


def docstring_paragraphs(path: Path) -> list[list[str]]:
    """The indented blocks of a module's docstring, dedented, cut at blank lines."""
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=True) or ""
    paragraphs, current = [], []
    for line in [*doc.splitlines(), ""]:
        if line.startswith("    ") and line.strip():
            current.append(line[4:])
        elif current and (not line.strip() or not line.startswith("    ")):
            paragraphs.append(current)
            current = []
    return paragraphs


def kind_of(paragraph: list[str]) -> str:
    first = paragraph[0].lstrip()
    if first.startswith(">>>"):
        return "doctest"
    return "shell" if first.split(" ", 1)[0] in COMMANDS else "python"


def examples(name: str, path: Path) -> list[tuple[str, str]]:
    """(kind, text) of each example in the module's docstring; consecutive Python paragraphs join into one."""
    found: list[tuple[str, str]] = []
    for paragraph in docstring_paragraphs(path):
        kind, text = kind_of(paragraph), "\n".join(paragraph)
        if found and kind == found[-1][0] == "python":
            found[-1] = (kind, found[-1][1] + "\n\n" + text)
        else:
            found.append((kind, text))
    return found


def python_examples(name: str) -> str:
    return "\n\n".join(text for kind, text in examples(name, modules()[name]) if kind == "python")


def defined_names(path: Path) -> set[str]:
    """Names a module defines or imports at its top level (what `from module import name` can read)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def missing_imports(code: str, known: dict[str, Path]) -> list[str]:
    """`module.name` for each name `code` imports from the package that its module does not define."""
    missing = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "memupdate":
            if node.module not in known:
                missing.append(node.module)
                continue
            defined = defined_names(known[node.module])
            missing += [f"{node.module}.{a.name}" for a in node.names
                        if a.name not in defined and f"{node.module}.{a.name}" not in known]
        elif isinstance(node, ast.Import):
            missing += [a.name for a in node.names if a.name.split(".")[0] == "memupdate" and a.name not in known]
    return missing


def shell_breaches(line: str, known: dict[str, Path]) -> list[str]:
    """What is wrong with one example command line: an unknown command or option, a module or target that
    is not there, an old-style `--json PATH`."""
    breaches = []
    for command in re.split(r"&&|;|\|", line):
        words = [w.strip("[]") for w in shlex.split(command, comments=True)]
        words = [w for w in words if w and w != "..."]
        if ">" in words:
            words = words[: words.index(">")]
        if not words:
            continue
        if words[0] == "memupdate":
            group, rest = typer.main.get_command(app), words[1:]
            while rest and hasattr(group, "commands") and rest[0] in group.commands:
                group, rest = group.commands[rest[0]], rest[1:]
            if hasattr(group, "commands") and not group.invoke_without_command:
                breaches.append(f"{command.strip()!r}: no command {rest[:1]}")
                continue
            options = {o for p in group.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
            breaches += [f"{command.strip()!r}: no option {w}" for w in rest if w.startswith("--") and w.split("=")[0] not in options]
            if old_json_path(rest) is not None:
                breaches.append(f"{command.strip()!r}: --json takes no file (--out PATH)")
        elif words[:2] == ["python", "-m"]:
            if words[2] not in known:
                breaches.append(f"{command.strip()!r}: no module {words[2]}")
                continue
            usage = module_help(words[2])
            breaches += [f"{command.strip()!r}: no option {w}" for w in words[3:] if w.startswith("--") and w.split("=")[0] not in usage]
        elif words[0] == "python" and words[1] != "-m" and not (REPO / words[1]).is_file():
            breaches.append(f"{command.strip()!r}: no file {words[1]}")
        elif words[0] == "make" and not re.search(rf"^{words[1]}:", (REPO / "Makefile").read_text(), re.M):
            breaches.append(f"{command.strip()!r}: no make target {words[1]}")
    return breaches


def module_help(name: str) -> str:
    """What `python -m name --help` prints (its `main`, run in this process)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        importlib.import_module(name).main(["--help"])
    return out.getvalue()


def test_every_docstring_example_compiles_imports_what_exists_and_names_real_commands() -> None:
    known = modules()
    breaches = []
    for name, path in sorted(known.items()):
        if name in NOT_CODE:
            continue
        for kind, text in examples(name, path):
            if kind == "python":
                try:
                    compile(text, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                except SyntaxError as exc:
                    breaches.append(f"{name}: {exc}")
                    continue
                breaches += [f"{name} imports {m}, which does not exist" for m in missing_imports(text, known)]
            elif kind == "shell":
                breaches += [f"{name}: {b}" for line in text.splitlines() for b in shell_breaches(line, known)]
    assert not breaches, "docstring examples that are not true:\n" + "\n".join(breaches)


def test_the_checks_find_an_example_that_is_not_true() -> None:
    known = modules()
    assert missing_imports("from memupdate.judge import Statement, default_judge\nimport memupdate.nowhere", known) == [
        "memupdate.judge.default_judge", "memupdate.nowhere"]
    assert shell_breaches("memupdate bench all --json bench.json --plot cost.png", known) == [
        "'memupdate bench all --json bench.json --plot cost.png': --json takes no file (--out PATH)"]
    assert len(shell_breaches("memupdate compact BANK --sized 3 && python -m memupdate.nowhere; make nothing", known)) == 3
    assert shell_breaches("python -m memupdate.bench.tools --json OUT", known) == [
        "'python -m memupdate.bench.tools --json OUT': no option --json"]
    assert kind_of(["memupdate demo"]) == "shell" and kind_of([">>> 1"]) == "doctest" and kind_of(["x = 1"]) == "python"


@pytest.mark.parametrize("name", sorted(n for n, p in modules().items() if any(k == "doctest" for k, _ in examples(n, p))))
def test_docstring_doctests(name: str) -> None:
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert attempted and not failed


def run_example(name: str, store: MemoryStore, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = python_examples(name)
    assert code, f"{name} has no Python example"
    bank = store.scoped((*store.namespace, "alice"))
    bank.create_many([NewMemory("Alice likes jazz."), NewMemory("Alice lives in Paris."), NewMemory("Alice has a cat.")])
    fork = bank.fork((*bank.namespace, "traj", "example"))
    fork.update(fork.list()[0].key, content="Alice likes jazz and blues.")
    monkeypatch.chdir(folder)
    exec(compile(code, name, "exec"), {"store": store, "bank": bank, "fork": fork, "engine": store.engine})


@pytest.mark.parametrize("name", RUNS)
def test_docstring_example_runs(name: str, store: MemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_example(name, store, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS_SLOW)
def test_docstring_example_that_loads_a_model_runs(name: str, store: MemoryStore, tmp_path: Path, monkeypatch) -> None:
    run_example(name, store, tmp_path, monkeypatch)


def readme_python() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def test_the_readme_tour_in_python_runs(store: MemoryStore, sample, database_url, monkeypatch) -> None:
    """The tour as written, on the shipped sample conversation's bank (renamed per test) in the test database."""
    from memupdate.rl.data.ingest import ingest_conversation
    from memupdate.settings import get_settings

    (tour,) = readme_python()
    assert '("locomo", "sample-1")' in tour
    ingest_conversation(store, sample)
    monkeypatch.setenv("MEMUPDATE_DATABASE_URL", database_url)
    get_settings.cache_clear()
    try:
        scope: dict = {}
        exec(compile(tour.replace('"sample-1"', f'"{sample.sample_id}"'), "README.md", "exec"), scope)
    finally:
        get_settings.cache_clear()
    assert scope["episode"].operations >= 0 and not store.scoped(("locomo", sample.sample_id, "traj", "readme")).count()
    assert scope["lg_store"] is not None
