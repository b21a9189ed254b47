"""The migrations write their values as literals, so a model's CHECK constraint can move on without them:
this test says when it has, and that the change needs a migration of its own.

Alembic's `compare_metadata` (what `drift()` and `alembic check` report) does not compare CHECK
constraints, so without this a kind added to `SOURCE_KINDS` would pass every schema check and fail at
the first insert. Read from the revisions' source with `ast`; the models' metadata is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

from sqlalchemy import CheckConstraint

from memupdate.migrations.models import metadata
from memupdate.migrations.schema import MIGRATIONS_DIR


def text_of(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def check_constraints_written(revisions: list[Path]) -> dict[str, str]:
    """Constraint name -> the SQL the last revision wrote for it (`sa.CheckConstraint(...)` in a table,
    `op.create_check_constraint(...)`), in revision order, dropped ones left out."""
    written: dict[str, str] = {}
    for path in revisions:
        upgrade = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == "upgrade")
        for call in (n for n in ast.walk(upgrade) if isinstance(n, ast.Call)):
            called = getattr(call.func, "attr", getattr(call.func, "id", ""))
            keywords = {k.arg: k.value for k in call.keywords}
            if called == "CheckConstraint" and "name" in keywords:
                written[text_of(keywords["name"])] = text_of(call.args[0])
            elif called == "create_check_constraint":
                written[text_of(call.args[0])] = text_of(call.args[2])
            elif called == "drop_constraint":
                written.pop(text_of(call.args[0]), None)
    return written


def test_every_check_constraint_is_what_the_migrations_wrote_last() -> None:
    revisions = sorted((MIGRATIONS_DIR / "versions").glob("0*.py"))
    written = check_constraints_written(revisions)
    modelled = {
        constraint.name: str(constraint.sqltext)
        for table in metadata.tables.values()
        for constraint in table.constraints
        if isinstance(constraint, CheckConstraint)
    }
    assert "ck_memory_sources_kind" in modelled
    assert modelled == written, "a model's CHECK constraint changed: write a migration that alters it"


def test_the_history_check_sees_a_later_revision(tmp_path: Path) -> None:
    later = tmp_path / "0099_more_kinds.py"
    later.write_text(
        "def upgrade():\n"
        "    op.drop_constraint('ck_memory_sources_kind', 'memory_sources')\n"
        "    op.create_check_constraint('ck_memory_sources_kind', 'memory_sources', \"kind IN ('a', 'b')\")\n"
    )
    first = sorted((MIGRATIONS_DIR / "versions").glob("0*.py"))
    assert check_constraints_written([*first, later])["ck_memory_sources_kind"] == "kind IN ('a', 'b')"
