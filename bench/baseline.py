"""A benchmark's baseline: the same benchmark at a named earlier commit, measured in the same run.

    from memupdate.bench.baseline import BASELINE_COMMIT, run_at
    theirs = run_at(BASELINE_COMMIT, "watch", ["--people", "100", "--memories", "5"], engine)
    theirs["runs"]          # that commit's own JSON summary (its `now` path)

Production code keeps one implementation of each step; what a benchmark compares today's code with is
the code of an earlier commit. `run_at` checks the commit out in a git worktree (`git worktree add
--detach`, in a temporary folder) and runs that commit's own `python -m memupdate.bench.<name>` in a
subprocess, on:
- that tree's code: the installed package points at this checkout and maps its folders onto
  `memupdate.*` (pyproject.toml's package-dir), so PYTHONPATH cannot stand in for it; a meta-path
  finder ahead of the installed one reads the tree's own package-dir instead;
- a database of its own on the benchmark's server (its schema at its own revision), dropped after;
- a data folder of its own (its judge checkpoint built from its own shipped weights, never over the
  one this checkout's processes read).
It runs only its `now` path and no baseline of its own (`--paths now`, `--baseline none`: each passed
where that commit's module takes it). The worktree sits beside a link to the checkout's `../shared`,
so paths a benchmark finds there (the development data) resolve as they do here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memupdate.bench.common import REPO, console

# The previous release: the last commit that landed (CI green, 2026-12-08). 07cbdca, named before, was the
# last whose watcher and heuristic kept the paths before their speed-ups as flags.
BASELINE_COMMIT = "344e8f3"
# What a baseline run is told, where its module takes the option: today's path only, no baseline of its own.
ITS_OWN_PATH_ONLY = {"--paths": "now", "--baseline": "none"}

# Run in the baseline's interpreter (`-P`: no working folder on sys.path): argv is the tree, the module
# and its arguments. Every package of the tree's package-dir maps to its folder, ahead of the installed
# finder; subpackages not listed there are found under their parent's folder as usual.
_IN_TREE = """
import importlib.util, runpy, sys, tomllib
from pathlib import Path

tree, module = Path(sys.argv[1]), sys.argv[2]
folders = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


class TreeFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in folders:
            return None
        folder = tree / folders[name]
        return importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])


sys.meta_path.insert(0, TreeFinder)
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def baseline_option(parser, what: str = "") -> None:
    """A benchmark's `--baseline COMMIT` (default BASELINE_COMMIT; `none`: today's path alone)."""
    parser.add_argument("--baseline", default=BASELINE_COMMIT, metavar="COMMIT",
                        help=f"the commit measured beside today's code{what}, in a git worktree (default {BASELINE_COMMIT}; "
                             "none: today's code alone)")


def baseline_of(value: str | None) -> str | None:
    """The commit a `--baseline` value names, shortened (None for `none` or nothing)."""
    if not value or value.lower() == "none":
        return None
    return resolve(value)


def resolve(commit: str, repo: Path = REPO) -> str:
    """`commit` as a 7-digit id of `repo`; a clear error when it is not one."""
    found = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=7", "--verify", "--quiet", f"{commit}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"--baseline {commit!r} is not a commit of {repo} (a git checkout is needed): "
                         "name one of `git log --oneline`, or pass --baseline none")
    return found.stdout.strip()


@contextmanager
def checkout(commit: str, repo: Path = REPO) -> Iterator[Path]:
    """`commit` of `repo` checked out in a detached worktree in a temporary folder (beside a link to
    `repo`'s ../shared where there is one); the worktree removed after."""
    folder = Path(tempfile.mkdtemp(prefix=f"memupdate-baseline-{commit}-"))
    tree = folder / "repo"
    shared = repo.parent / "shared"
    if shared.is_dir():
        (folder / "shared").symlink_to(shared)
    try:
        made = subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), commit],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise SystemExit(f"cannot check out {commit!r} in a worktree: {made.stderr.strip()}; "
                             "pass --baseline with a commit of this repository, or none")
        yield tree
    finally:
        if tree.exists():
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def tree_command(tree: Path, module: str, argv: Sequence[str] = ()) -> list[str]:
    """The command running `python -m module argv` on the code of `tree` (a checkout of this project)."""
    return [sys.executable, "-P", "-c", _IN_TREE, str(tree), module, *argv]


def options_of(tree: Path, name: str) -> str:
    """The help of `tree`'s benchmark `name`: the options it takes, as its own parser lists them."""
    shown = subprocess.run(tree_command(tree, f"memupdate.bench.{name}", ["--help"]), capture_output=True, text=True)
    return shown.stdout


@contextmanager
def own_database(engine, name: str) -> Iterator[str]:
    """A database `name` of its own on `engine`'s server, its URL; dropped after."""
    from sqlalchemy import text

    def drop() -> None:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    drop()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield engine.url.set(database=name).render_as_string(hide_password=False)
    finally:
        drop()


def run_at(commit: str, name: str, argv: Sequence[str], engine, *, options: Mapping[str, str] = ITS_OWN_PATH_ONLY) -> dict[str, Any]:
    """Benchmark `name` with `argv` as the code of `commit` runs it (see the module docstring), its tables
    printed as it goes; its JSON summary. `options` are added where that commit's module takes them."""
    console.rule(f"baseline: bench {name} at {commit}")
    with checkout(commit) as tree, own_database(engine, f"bench_baseline_{commit}") as url, \
            tempfile.TemporaryDirectory(prefix="memupdate-baseline-data-") as data:
        out = Path(data) / "summary.json"
        taken = options_of(tree, name)
        extra = [item for option, value in options.items() if option in taken for item in (option, value)]
        command = tree_command(tree, f"memupdate.bench.{name}", [*argv, *extra, "--url", url, "--out", str(out)])
        done = subprocess.run(command, env={**os.environ, "MEMUPDATE_DATA_DIR": str(Path(data) / "memupdate")})
        if done.returncode != 0:
            raise SystemExit(f"bench {name} at the baseline {commit} failed (exit {done.returncode}); "
                             "pass --baseline none to measure today's code alone")
        summary = json.loads(out.read_text())
    console.rule(f"bench {name}: today's code")
    return summary
