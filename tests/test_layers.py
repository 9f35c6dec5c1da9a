"""Imports point one way (docs/DESIGN.md, "Map"): every import in backend/ and app/, the lazy ones
inside functions too, read from the source, checked against the layer table; and no import cycles."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("backend", "app")

# layer -> the other layers it may import (a layer may always import itself)
ALLOWED = {
    "core": set(),
    "data": {"core"},
    "runtime": {"core", "data"},  # backend/runtime/ and backend/tokenizers.py (its GGUF cache is runtime's)
    "storage": {"core"},
    "measure": {"core", "data", "runtime"},
    "training": {"core", "data", "runtime", "measure"},
    "study": {"core", "data", "runtime", "measure"},
    "cli": {"core", "data", "runtime", "measure", "storage", "study", "training", "root"},
    "app": {"core", "data", "runtime", "storage", "measure", "root"},
    "root": set(),  # backend/__init__.py
}
# what the pure layers may import from outside the project: the standard library only
STDLIB_ONLY = {"core", "data"}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "app":
        return "app"
    if len(parts) == 1:
        return "root"
    return {"__main__": "cli", "tokenizers": "runtime"}.get(parts[1], parts[1])


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = project_modules()


def imported_names(module: str, path: Path) -> set[str]:
    """Every module name an import statement in the file names (relative imports made absolute)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            names.add(name)
            names.update(f"{name}.{alias.name}" for alias in node.names if f"{name}.{alias.name}" in MODULES)
    return names


def project_module(name: str) -> str | None:
    """The project module a name refers to (the longest prefix that is one), None outside the project."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        targets = {project_module(name) for name in imported_names(module, path)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
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
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_has_a_known_layer():
    assert "backend.core.resolve" in MODULES and "app" in MODULES
    assert {layer_of(m) for m in MODULES} <= set(ALLOWED)


def test_imports_point_the_allowed_way():
    wrong = sorted(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
                   for module, targets in import_graph().items() for target in targets
                   if layer_of(target) != layer_of(module) and layer_of(target) not in ALLOWED[layer_of(module)])
    assert wrong == []


@pytest.mark.parametrize("layer", sorted(STDLIB_ONLY))
def test_pure_layers_import_only_the_standard_library(layer):
    outside = sorted(f"{module} imports {name}" for module, path in MODULES.items() if layer_of(module) == layer
                     for name in imported_names(module, path)
                     if name.split(".")[0] not in sys.stdlib_module_names and project_module(name) is None)
    assert outside == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_checks_see_a_wrong_import_and_a_cycle():
    # the checker itself: a hand-made graph with an upward import and a two-module loop
    graph = {"backend.core.a": {"backend.runtime.b"}, "backend.runtime.b": {"backend.core.a"}, "app.c": set()}
    assert cycles(graph) == [["backend.core.a", "backend.runtime.b"]]
    assert "runtime" not in ALLOWED["core"] and "cli" not in ALLOWED["runtime"] and "app" not in ALLOWED["runtime"]
    assert "runtime" not in ALLOWED["storage"]


# House size rules (docs/DESIGN.md; issue 8: "no module over ~400 lines, no function over ~60").
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def oversized(paths: list[Path], *, module_lines: int = MAX_MODULE_LINES,
              function_lines: int = MAX_FUNCTION_LINES) -> list[str]:
    """'path: N lines' for each module over the limit and 'path:line name: N lines' for each function."""
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if len(text.splitlines()) > module_lines:
            found.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > function_lines:
                    found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_god_files_and_no_long_functions():
    assert oversized(_sources()) == []


def test_the_size_check_sees_a_long_function(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("def f():\n" + "    x = 1\n" * 70, encoding="utf-8")
    assert oversized([long]) == [f"{long}:1 f: 71 lines"]
    assert oversized([long], module_lines=10) == [f"{long}: 71 lines", f"{long}:1 f: 71 lines"]
