"""A newcomer reads a module's contract in its first lines and the README in one sitting: no module
docstring narrates runs or issues (that history is dated in docs/log.md), and the README stays short.

Read from the source with `ast` (nothing is imported).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_layers import REPO, modules

# An issue by number, or a run by its place in the series ("the eleventh run's student").
HISTORY = re.compile(
    r"\bissue \d+|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
    r"thirteenth|fourteenth|fifteenth|last|previous)(?:'s)? run\b",
    re.IGNORECASE,
)
README_LINES = 160


def history_in_docstring(path: Path) -> list[str]:
    return HISTORY.findall(ast.get_docstring(ast.parse(path.read_text())) or "")


def test_no_module_docstring_narrates_runs_or_issues() -> None:
    narrating = {name: found for name, path in modules().items() if (found := history_in_docstring(path))}
    assert not narrating, f"a module's docstring states its contract; move this history to docs/log.md: {narrating}"


def test_the_history_check_finds_a_run(tmp_path: Path) -> None:
    notebook = tmp_path / "notebook.py"
    notebook.write_text('"""Masks handles. The eleventh run\'s student wrote 14 escapes; see issue 35."""\n')
    assert history_in_docstring(notebook) == ["eleventh run", "issue 35"]


def test_the_readme_is_short_and_links_the_learning_log() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < README_LINES
    assert "(docs/log.md)" in readme and (REPO / "docs" / "log.md").is_file()
