"""The package's import graph, read from the source with ast (no module is imported):
the command sits on top, the faces below it, the binding at the bottom, and no circle.

Every import counts, also one inside a function (a face imported only when its command
runs): it is an edge all the same when that code runs."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "undolog"
# What sits above the binding: the command, the demos, and the faces
FACES = ("undolog.cli", "undolog.dashboard", "undolog.mcp_proxy", "undolog.integrations")
ABOVE_BINDING = (*FACES, "undolog.demos")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The undolog modules ``name`` imports: ``from undolog import saga`` names the module
    undolog.saga, ``from undolog import UndoLog`` the package undolog."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in known else base)
    return {m for m in found if m in known}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) - {name} for name, path in modules.items()}


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_graph_is_read() -> None:
    """The reading itself: the edges this test relies on are found."""
    graph = _graph()
    assert "undolog.cli.sessions" in graph["undolog.cli"]
    assert "undolog.saga" in graph["undolog.cli.sessions"]
    assert "undolog.dashboard.server" in graph["undolog.cli.dashboard"]  # inside a function
    assert "undolog.demos.stories" in graph["undolog.demos.dashboard"]
    assert "undolog.client" in graph["undolog"]


def test_nothing_below_the_command_imports_it() -> None:
    wrong = {
        (module, imported)
        for module, imports in _graph().items()
        if not _within(module, ("undolog.cli",))
        for imported in imports
        if _within(imported, ("undolog.cli",))
    }
    assert not wrong, f"modules below the command import it: {sorted(wrong)}"


def test_the_binding_imports_no_face() -> None:
    wrong = {
        (module, imported)
        for module, imports in _graph().items()
        if not _within(module, ABOVE_BINDING)
        for imported in imports
        if _within(imported, ABOVE_BINDING)
    }
    assert not wrong, f"binding modules import a face or a demo: {sorted(wrong)}"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports, if there is any (depth-first, iterative)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path = [start]
        on_path = {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if step in on_path:
                return [*path[path.index(step) :], step]
            if step not in done:
                path.append(step)
                on_path.add(step)
                stack.append(iter(sorted(graph[step])))
    return None


def test_no_circle_among_the_modules() -> None:
    circle = _cycle(_graph())
    assert circle is None, "an import circle: " + " -> ".join(circle or [])


def test_a_circle_is_found() -> None:
    """The search finds a circle where there is one, and none where there is none."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


# Base tables are the engine's own: a module that reads one directly depends on the
# journal's layout, which the migrations change (the views are the interface that stays).
BASE_TABLE = re.compile(r"\bundolog\.undolog_\w+")
# The migration runner keeps its own bookkeeping tables.
MAY_NAME_BASE_TABLES = {"undolog.migrations"}


def test_no_module_but_the_migration_runner_names_a_base_table() -> None:
    named = {
        name: sorted(set(BASE_TABLE.findall(path.read_text())))
        for name, path in _modules().items()
        if name not in MAY_NAME_BASE_TABLES
    }
    assert {name: tables for name, tables in named.items() if tables} == {}
