"""`bench/baseline.py`: a benchmark's baseline runs the named commit's own code, checked out in a git
worktree that is removed after. A planted repository of two commits (the package mapped as
pyproject.toml's package-dir maps ours) stands in for this one; no database, no model."""

from __future__ import annotations

import subprocess

import pytest

from memupdate.bench.baseline import checkout, options_of, resolve, tree_command

PYPROJECT = """[tool.setuptools.package-dir]
"memupdate" = "memupdate"
"memupdate.bench" = "bench"
"""
PROBE = """import argparse, sys
import memupdate

parser = argparse.ArgumentParser()
parser.add_argument("{option}")
args, rest = parser.parse_known_args()
print(memupdate.VERSION, __file__, rest)
"""


def git(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def planted(tmp_path):
    """A repository whose first commit says v1 and takes --paths, its second v2 and --baseline."""
    repo = tmp_path / "repo"
    (repo / "memupdate").mkdir(parents=True)
    (repo / "bench").mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "bench" / "__init__.py").write_text("")
    git(tmp_path, "init", "-q", str(repo))
    for version, option in (("v1", "--paths"), ("v2", "--baseline")):
        (repo / "memupdate" / "__init__.py").write_text(f"VERSION = {version!r}\n")
        (repo / "bench" / "probe.py").write_text(PROBE.format(option=option))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", version)
    return repo


def test_the_baseline_runs_the_named_commits_own_code_in_a_worktree_removed_after(planted) -> None:
    first = resolve("HEAD~1", planted)
    assert len(first) == 7 and first != resolve("HEAD", planted)
    with checkout(first, planted) as tree:
        taken = options_of(tree, "probe")
        assert "--paths" in taken and "--baseline" not in taken
        ran = subprocess.run(tree_command(tree, "memupdate.bench.probe", ["--paths", "now", "--out", "x"]),
                             capture_output=True, text=True, cwd=planted)
        assert ran.returncode == 0, ran.stderr
        # That commit's package, not the installed one (which maps `memupdate` onto this checkout).
        assert ran.stdout.split() == ["v1", str(tree / "bench" / "probe.py"), "['--out',", "'x']"]
    assert not tree.exists()
    assert git(planted, "worktree", "list").count("\n") == 0  # only the repository's own tree is left


def test_a_baseline_that_is_no_commit_says_what_to_pass(planted) -> None:
    with pytest.raises(SystemExit, match="--baseline none"):
        resolve("no-such-commit", planted)
