"""No import cycle inside annotation, file by file, lazy imports included (docs/architecture.md,
"The wings of annotation"). import-linter's wing contract sees the wings; this sees the files in
them, e.g. a service and the task that calls it back, which must not import each other."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "annotation"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every name an import statement anywhere in the module (functions too) refers to: the
    module and, for `from x import y`, also `x.y` (which may be a submodule)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """Module → the modules of the package it imports (the longest prefix that is a module)."""
    files = {
        _module_name(path): path
        for path in (REPO_ROOT / PACKAGE).rglob("*.py")
        if "migrations" not in path.parts
    }

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        while parts:
            if ".".join(parts) in files:
                return ".".join(parts)
            parts.pop()
        return None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        targets = _imported_names(tree, module, path.name == "__init__.py")
        graph[module] = {
            target for name in targets if (target := resolve(name)) is not None and target != module
        }
    return graph


def cycle_in(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph (its modules in import order, the first repeated), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_the_annotation_files_import_one_another_without_a_cycle():
    assert cycle_in(import_graph()) == []


def test_a_service_that_imported_its_task_would_be_reported_as_a_cycle():
    graph = import_graph()
    graph["annotation.quality.run"].add("annotation.quality.tasks")
    cycle = cycle_in(graph)
    assert cycle[0] == cycle[-1]
    assert sorted(set(cycle)) == ["annotation.quality.run", "annotation.quality.tasks"]
