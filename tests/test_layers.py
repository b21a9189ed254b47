"""Imports point one way, and no module imports itself back through others, not even inside a function;
inside `rl/` too (`rl/data` at its bottom, `rl/`'s own modules above it, `rl/distill` and `rl/verl` on top);
a migration imports no constant from the package (editing a tuple must not rewrite history);
the store is sealed: no module outside `store/` (and the migrations) names its tables, its statements
or MemoryStore's private methods, and the store declares no other layer's tables; a module outside
`store/` imports the store from `memupdate.store` only (never a submodule), and every module imports
`MemupdateError` from its one home, `memupdate.errors`.

Read from the source with `ast` (nothing is imported): every module the wheel installs, each of
pyproject's `packages` in the folder `package-dir` maps it to (`memupdate.cli` under `memupdate/`).
An import counts wherever it is: at module level, inside a function, or in an `if TYPE_CHECKING:` block
(an annotation naming a module above is an arrow upward too: the base class would know its subclasses).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The README's order: a layer imports only the layers before it (`text` and `llm` are siblings).
# `migrations` sits above every layer that declares tables, since running them loads them all.
LAYERS = ["store", "text", "llm", "judge", "bank", "scoring", "migrations", "agent", "rl"]
ABOVE_ALL = {"cli", "bench"}
# Inside `rl/`, each part's rank: `rl/data` at the bottom, `rl/`'s own modules (`evaluate`, `episode`, ...) above
# it, the learning pipeline and verl's adapters on top (siblings).
RL_PARTS = {"data": 0, "": 1, "distill": 2, "verl": 2}


def modules(root: Path = REPO) -> dict[str, Path]:
    """Module name -> file, for every module the wheel built from `root`'s pyproject.toml installs."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {}
    for package in setuptools["packages"]:
        for path in (root / package_folder(package, setuptools["package-dir"])).glob("*.py"):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def package_folder(package: str, folders: dict[str, str]) -> str:
    """Where setuptools finds `package`: its `package-dir` entry, else its parent's folder and its own name."""
    if package in folders:
        return folders[package]
    parent, _, leaf = package.rpartition(".")
    return f"{package_folder(parent, folders)}/{leaf}" if parent else package


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports, wherever in the file (functions and `TYPE_CHECKING` blocks included)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if path.stem == "__init__" else name.split(".")[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                target = next((c for c in (f"{base}.{alias.name}", base) if c in known), None)
                if target and target != name:
                    found.add(target)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
    return found


def layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "memupdate"


def rl_part(module: str) -> str:
    """The part of `rl/` a module of it is in: `data`, `distill`, `verl`, or "" for `rl/`'s own modules."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 else ""


def upward_imports(known: dict[str, Path]) -> list[str]:
    """Each import of a layer above the importer's, or inside `rl/` of a part ranked above its own."""
    upward = []
    for name, path in known.items():
        own = layer(name)
        for target in imports(name, path, known):
            theirs = layer(target)
            if own in LAYERS and (theirs in ABOVE_ALL or (theirs in LAYERS and LAYERS.index(theirs) > LAYERS.index(own))):
                if {own, theirs} != {"text", "llm"}:
                    upward.append(f"{name} -> {target}")
            elif own == theirs == "rl" and RL_PARTS[rl_part(target)] > RL_PARTS[rl_part(name)]:
                upward.append(f"{name} -> {target}")
    return sorted(upward)


def test_layers_import_only_the_layers_below_them() -> None:
    upward = upward_imports(modules())
    assert not upward, "imports that point upward: " + "; ".join(upward)


def test_every_part_of_rl_is_ranked() -> None:
    assert {rl_part(name) for name in modules() if layer(name) == "rl"} == set(RL_PARTS)


def test_the_layer_check_finds_an_upward_import_inside_rl(tmp_path: Path) -> None:
    """An import planted in a copy of the layout, from `rl/data` up to `rl/distill` (inside a function) and
    from `rl/`'s own modules up to `rl/verl`, is found; one from `rl/distill` down to `rl/data` is not."""
    packages = ["memupdate.rl", "memupdate.rl.data", "memupdate.rl.distill", "memupdate.rl.verl"]
    (tmp_path / "pyproject.toml").write_text(
        f"[tool.setuptools]\npackages = {packages!r}\n".replace("'", '"')
        + '[tool.setuptools.package-dir]\n"memupdate.rl" = "rl"\n'
    )
    for folder in ("rl", "rl/data", "rl/distill", "rl/verl"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "rl/data/rows.py").write_text("def units():\n    from memupdate.rl.distill.task import Task\n")
    (tmp_path / "rl/evaluate.py").write_text("from memupdate.rl.verl import tools\n")
    (tmp_path / "rl/verl/tools.py").write_text("")
    (tmp_path / "rl/distill/task.py").write_text("from memupdate.rl.data.rows import units\nfrom memupdate.rl import evaluate\n")
    assert upward_imports(modules(tmp_path)) == [
        "memupdate.rl.data.rows -> memupdate.rl.distill.task",
        "memupdate.rl.evaluate -> memupdate.rl.verl.tools",
    ]


def test_every_installed_module_is_read() -> None:
    known = modules()
    assert {"memupdate.cli.watch", "memupdate.cli.history", "memupdate.cli.common", "memupdate.settings",
            "memupdate.bank.source_kinds", "memupdate.rl.distill.learn", "memupdate.migrations.env"} <= set(known)
    assert all(path.is_file() for path in known.values())


def test_no_import_circle_even_inside_functions() -> None:
    known = modules()
    circles = import_circles({name: imports(name, path, known) for name, path in known.items()})
    assert not circles, ("import circles (an import inside a function or under `if TYPE_CHECKING:` counts: move what "
                         "both sides need below them): " + "; ".join(circles))


def test_the_circle_check_reads_the_cli_folder(tmp_path: Path) -> None:
    """A circle planted in a copy of the layout, in `memupdate/cli/` (a package only `packages` names) and
    in a mapped folder, through a function-level import and an annotation-only import, is found."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackages = ["memupdate", "memupdate.cli", "memupdate.bank"]\n'
        '[tool.setuptools.package-dir]\n"memupdate" = "memupdate"\n"memupdate.bank" = "bank"\n'
    )
    for folder in ("memupdate", "memupdate/cli", "bank"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "memupdate/cli/history.py").write_text("from memupdate.cli.common import console\n")
    (tmp_path / "memupdate/cli/common.py").write_text("def undo():\n    from memupdate.cli import history\n")
    (tmp_path / "bank/kinds.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from memupdate.bank.export import Report\n"
    )
    (tmp_path / "bank/export.py").write_text("from memupdate.bank.kinds import Kind\n")
    known = modules(tmp_path)
    assert {"memupdate.cli.history", "memupdate.cli.common", "memupdate.bank.kinds"} <= set(known)
    circles = import_circles({name: imports(name, path, known) for name, path in known.items()})
    assert sorted(circles) == [
        "memupdate.bank.export -> memupdate.bank.kinds -> memupdate.bank.export",
        "memupdate.cli.common -> memupdate.cli.history -> memupdate.cli.common",
    ], circles


def import_circles(graph: dict[str, set[str]]) -> list[str]:
    """Each circle a depth-first walk of the import graph closes, as `a -> b -> a`."""
    circles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*path[path.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return circles


# What only `store/` may name: its tables (as ORM classes or Core tables) and its statement builders.
STORE_TABLE_NAMES = {"Memory", "MemoryEvent", "memories", "events", "copy_rows"}
# SQL keywords in capitals, as this codebase writes SQL text (prose says "from memories" too).
SQL_ON_STORE_TABLES = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN|TABLE)\s+(?:memories|memory_events)\b")


def store_private_methods() -> set[str]:
    """The `_`-prefixed methods of `MemoryStore` (dunders aside), read from its source."""
    tree = ast.parse((REPO / "store" / "memory_store.py").read_text())
    (store,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MemoryStore"]
    return {n.name for n in store.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_") and not n.name.endswith("__")}


def store_breaches(name: str, path: Path, private: set[str]) -> list[str]:
    """Where module `name` reaches into the store: its table objects, its statements module, the private
    methods of MemoryStore, or SQL text naming its tables."""
    found = []
    tree = ast.parse(path.read_text())
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memupdate.store."):
            if node.module == "memupdate.store.statements":
                found.append(f"{name} imports {node.module}")
            found += [f"{name} imports {a.name} from {node.module}" for a in node.names if a.name in STORE_TABLE_NAMES]
        elif isinstance(node, ast.Import):
            found += [f"{name} imports {a.name}" for a in node.names if a.name == "memupdate.store.statements"]
        elif isinstance(node, ast.Attribute) and node.attr in private and not (
            isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
        ):
            found.append(f"{name} calls MemoryStore.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and SQL_ON_STORE_TABLES.search(node.value):
            found.append(f"{name} has SQL on {SQL_ON_STORE_TABLES.search(node.value).group(0)!r}")
    return found


def test_nothing_outside_the_store_touches_its_tables_or_private_methods() -> None:
    private = store_private_methods()
    assert {"_log", "_autocommitted", "_remove"} <= private  # the check reads the class it guards
    breaches = [
        breach
        for name, path in modules().items()
        if layer(name) not in ("store", "migrations")
        for breach in store_breaches(name, path, private)
    ]
    assert not breaches, "the store is sealed: " + "; ".join(sorted(breaches))


def test_the_seal_check_finds_a_breach(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text(
        "from memupdate.store.statements import memories\n"
        "from memupdate.store.models import Memory\n"
        "from memupdate.store.memory_store import copy_rows\n"
        "def f(bank, conn):\n"
        "    bank._log(conn, [])\n"
        "    conn.execute(text('DELETE FROM memories WHERE key = :k'))\n"
    )
    breaches = store_breaches("memupdate.bank.leaky", leaky, store_private_methods())
    assert len(breaches) == 6, breaches  # the statements module, three names, a private call, SQL text


def narrow_import_breaches(name: str, path: Path, known: dict[str, Path]) -> list[str]:
    """Where module `name` imports a submodule of the store (`memupdate.store.<x>`, or `<x>` from
    `memupdate.store`) rather than the package, or imports `MemupdateError` from anywhere but `memupdate.errors`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith("memupdate.store."):
                found.append(f"{name} imports {module}")
            elif module == "memupdate.store":
                found += [f"{name} imports {module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
            found += [f"{name} imports MemupdateError from {module}" for a in node.names
                      if a.name == "MemupdateError" and module != "memupdate.errors"]
        elif isinstance(node, ast.Import):
            found += [f"{name} imports {a.name}" for a in node.names if a.name.startswith("memupdate.store.")]
    return found


def test_callers_import_the_store_package_and_the_base_error_from_its_home() -> None:
    """The store's surface is `memupdate.store`'s `__all__`. The migrations are exempt, as from the seal: they
    build the schema from the store's ORM classes. Tests are exempt from the package rule (they check the
    store's internals: its tables, the embedded server, the LangGraph adapter), not from the error's home."""
    known = modules()
    breaches = [
        breach
        for name, path in known.items()
        if layer(name) not in ("store", "migrations")
        for breach in narrow_import_breaches(name, path, known)
    ]
    breaches += [
        breach
        for path in sorted((REPO / "tests").glob("*.py"))
        for breach in narrow_import_breaches(f"tests.{path.stem}", path, known)
        if "MemupdateError" in breach
    ]
    breaches += [b for b in narrow_import_breaches("memupdate.store", known["memupdate.store"], known) if "MemupdateError" in b]
    assert not breaches, "import the store from memupdate.store, MemupdateError from memupdate.errors: " + "; ".join(sorted(breaches))


def test_the_narrow_import_check_finds_a_submodule_import(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text(
        "from memupdate.store.records import namespace_path\n"
        "from memupdate.store import MemoryStore, promotion\n"
        "from memupdate.store.errors import MemupdateError\n"
        "def f():\n"
        "    import memupdate.store.database\n"
    )
    breaches = narrow_import_breaches("memupdate.bank.leaky", leaky, modules())
    assert len(breaches) == 5, breaches  # two submodule imports, one submodule by name, the error's path, a lazy import


def declared_tables() -> dict[str, str]:
    """Table name -> the module declaring it (`__tablename__ = "..."`), every module of the package."""
    tables = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__tablename__" for t in node.targets):
                tables[node.value.value] = name
    return tables


def test_the_store_declares_only_its_own_tables_and_the_migrations_load_every_table() -> None:
    tables = declared_tables()
    assert {t for t, module in tables.items() if layer(module) == "store"} == {"memories", "memory_events"}
    known = modules()
    loaded = imports("memupdate.migrations.models", known["memupdate.migrations.models"], known) | {"memupdate.store.models"}
    assert {module for module in tables.values()} <= loaded, "alembic check would not see every table"


def constants_imported(path: Path, known: dict[str, Path]) -> list[str]:
    """The package's module-level constants `path` imports (a name a module assigns or imports rather than defines),
    and any `import memupdate...` (its constants would be read as attributes)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "memupdate"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "memupdate":
            if node.module not in known:
                found.append(node.module)
                continue
            source = ast.parse(known[node.module].read_text())
            assigned = {t.id for n in source.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
            # A constant the module imports from another (bank.models' SOURCE_KINDS) is one too.
            assigned |= {a.asname or a.name for n in source.body if isinstance(n, ast.ImportFrom) for a in n.names}
            found += [f"{node.module}.{alias.name}" for alias in node.names if alias.name in assigned]
    return found


def test_no_migration_imports_a_constant_from_the_package() -> None:
    known = modules()
    revisions = sorted((REPO / "migrations" / "versions").glob("0*.py"))
    assert len(revisions) >= 4
    imported = {path.name: found for path in revisions if (found := constants_imported(path, known))}
    assert not imported, f"a migration writes its values as literals; these import them: {imported}"


def test_the_constant_check_finds_an_imported_constant(tmp_path: Path) -> None:
    revision = tmp_path / "0099_leaky.py"
    revision.write_text(
        "from memupdate.bank.models import SOURCE_KINDS, MemorySource\n"
        "from memupdate.settings import get_settings\n"
        "import memupdate.store.models\n"
    )
    assert constants_imported(revision, modules()) == ["memupdate.bank.models.SOURCE_KINDS", "memupdate.store.models"]
