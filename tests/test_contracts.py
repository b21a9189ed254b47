"""A newcomer reads a module's contract in its first lines and the README in one sitting: no module
docstring narrates runs or issues (that history is in git), and the README stays short, its layout rows
short and its links to pages that exist.

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
README_ROW_CHARS = 300


def history_in_docstring(path: Path) -> list[str]:
    return HISTORY.findall(ast.get_docstring(ast.parse(path.read_text())) or "")


def test_no_module_docstring_narrates_runs_or_issues() -> None:
    narrating = {name: found for name, path in modules().items() if (found := history_in_docstring(path))}
    assert not narrating, f"a module's docstring states its contract; the history belongs in git: {narrating}"


def test_the_history_check_finds_a_run(tmp_path: Path) -> None:
    notebook = tmp_path / "notebook.py"
    notebook.write_text('"""Masks handles. The eleventh run\'s student wrote 14 escapes; see issue 35."""\n')
    assert history_in_docstring(notebook) == ["eleventh run", "issue 35"]


def test_the_readme_is_short_and_links_pages_that_exist() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < README_LINES
    long_rows = [line[:40] for line in readme.splitlines() if line.startswith("| `") and len(line) > README_ROW_CHARS]
    assert not long_rows, f"README rows over {README_ROW_CHARS} characters (move the detail into the docstrings): {long_rows}"
    linked = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    assert "docs/student.md" in linked
    assert not [page for page in linked if not (REPO / page).is_file()]
