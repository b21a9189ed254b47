"""Imports point one way, and no module imports itself back through others, not even inside a function.

Read from the source with `ast` (nothing is imported): every module of the `memupdate` package as
pyproject's `package-dir` maps it; `if TYPE_CHECKING:` blocks are left out (they never run).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The README's order: a layer imports only the layers before it (`text` and `llm` are siblings).
LAYERS = ["store", "text", "llm", "bank", "scoring", "agent", "rl"]
ABOVE_ALL = {"cli", "bench"}


def modules() -> dict[str, Path]:
    folders = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found = {}
    for package, folder in folders.items():
        for path in (REPO / folder).glob("*.py"):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports, wherever in the file (functions included)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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


def test_layers_import_only_the_layers_below_them() -> None:
    known = modules()
    upward = []
    for name, path in known.items():
        own = layer(name)
        for target in imports(name, path, known):
            theirs = layer(target)
            if own in LAYERS and (theirs in ABOVE_ALL or (theirs in LAYERS and LAYERS.index(theirs) > LAYERS.index(own))):
                if {own, theirs} != {"text", "llm"}:
                    upward.append(f"{name} -> {target}")
    assert not upward, "imports that point upward: " + "; ".join(sorted(upward))


def test_no_import_circle_even_inside_functions() -> None:
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
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

    for start in graph:
        if start not in state:
            visit(start, [start])
    assert not circles, "import circles: " + "; ".join(circles)
