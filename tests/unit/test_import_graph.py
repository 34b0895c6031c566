"""The package's import graph, read from the source (no import runs): no cycles.

Every import counts, wherever it stands: at module level, inside a function (a lazy
import is still a dependency) and under ``if TYPE_CHECKING`` (a type a module needs is a
dependency too). A cycle hides which of two modules is the lower one, and makes each
change to one a change to the other. None is left (the last, executor <-> chunks/runs, went
when JobExecutor came to hold SplitJobRuns instead of mixing it in); a cycle that must be
tolerated for a while is listed with why, and the test fails for a listed one that is gone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import spoolrender

PACKAGE = Path(spoolrender.__file__).parent

KNOWN_CYCLES: set[frozenset[str]] = set()  # none: a new one fails the test


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(path: Path, modules: set[str]) -> Iterator[str]:
    """The package's modules that the module at ``path`` imports, anywhere in it."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from spoolrender import defaults` depends on that module, not on the names the
            # package itself re-exports (its __init__ imports api lazily, for `Spool`).
            submodules = {f"{node.module}.{a.name}" for a in node.names} & modules
            yield from submodules
            if node.module in modules and len(submodules) < len(node.names):
                yield node.module
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: a relative import (use absolute ones: spoolrender.X)")


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iteratively: the components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_the_package_has_no_import_cycle_but_the_known_one() -> None:
    modules = module_names()
    graph = {name: set(imports_of(path, set(modules))) - {name} for name, path in modules.items()}
    cycles = {frozenset(c) for c in strongly_connected(graph)}
    assert cycles - KNOWN_CYCLES == set(), f"new import cycles: {[sorted(c) for c in cycles - KNOWN_CYCLES]}"
    assert KNOWN_CYCLES - cycles == set(), f"gone, take them off KNOWN_CYCLES: {KNOWN_CYCLES - cycles}"


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert strongly_connected(graph) == [{"a", "b", "c"}]
