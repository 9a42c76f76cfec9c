"""The package's shape, checked mechanically: no import cycle anywhere in custody_app, store or
screens (type-checking imports and the console script's lazily imported subcommands count too),
and no module reaching into another object's private names."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

import grimp

from custody_app.interfaces.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("custody_app", "store", "screens")


def import_graph(*packages: str) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports (also under TYPE_CHECKING or inside a
    function)."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other in a loop (strongly connected components
    of more than one module, or a module importing itself), each sorted; Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a deep chain of imports cannot hit the recursion limit.
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1 or node in graph.get(node, ()):
                        found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def project_graph() -> dict[str, set[str]]:
    graph = import_graph(*PACKAGES)
    # The console script imports its own-parser subcommands by name, when run: edges too.
    graph[cli_main.__name__] |= {module for module, _ in cli_main._OWN_PARSERS.values()}
    return graph


def test_the_project_has_no_import_cycle() -> None:
    found = cycles(project_graph())
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_lazily_imported_subcommands_exist() -> None:
    graph = project_graph()
    for module, _ in cli_main._OWN_PARSERS.values():
        assert module in graph, f"{module} named by the console script is not a module"


def test_the_cycle_check_finds_a_cycle(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The same check on a package built with a cycle three modules long (one of its imports
    only under TYPE_CHECKING) fails and names exactly those modules."""
    pkg = tmp_path / "looped"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A package with an import cycle."""\n')
    (pkg / "a.py").write_text("from looped import b\n")
    (pkg / "b.py").write_text("from looped.c import C\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from looped.a import b\nclass C: ...\n")
    (pkg / "d.py").write_text("from looped import a\n")  # imports the cycle, is not in it
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert cycles(import_graph("looped")) == [["looped.a", "looped.b", "looped.c"]]
    finally:
        for name in [m for m in sys.modules if m == "looped" or m.startswith("looped.")]:
            del sys.modules[name]


def test_a_module_importing_itself_is_a_cycle() -> None:
    assert cycles({"x": {"x"}, "y": set()}) == [["x"]]
    assert cycles({"x": {"y"}, "y": {"z"}, "z": set()}) == []


def _is_super(node: ast.expr) -> bool:
    """`super()`: the object's own (inherited) attribute, like `self`."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "super" and not node.args)


def _private_attributes_of_others() -> list[str]:
    """`x._name` where `x` is not `self`, `cls` or `super()`: one module reaching into another's object
    (the core's `_head` or `_writing`, say) instead of its public API."""
    found = []
    for package in ("custody_app", "screens", "store"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                        and not node.attr.startswith("__")
                        and not (isinstance(node.value, ast.Name)
                                 and node.value.id in ("self", "cls"))
                        and not _is_super(node.value)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_touches_the_private_names_of_another_object() -> None:
    assert _private_attributes_of_others() == []
