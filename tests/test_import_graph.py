"""The file-level import graph of the shipped packages has no cycle.

Every import counts: top-level ones and those inside functions (a lazy import still ties two files
together; it only hides the knot from the interpreter). import-linter checks the contracts between
packages; this test checks that no two files, anywhere, need each other. Relative imports are
resolved; `from package import name` points at `package.name` when that is a module, else at
`package`; `import a.b.c` at the longest prefix that is a module of ours. Migrations are left out.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("annotation", "common", "datasets_app", "export", "training_bridge", "config")


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """{dotted module name: its file} for every .py file of `packages` under `root`."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "migrations" in parts or "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _imported_names(module: str, path: Path) -> Iterable[tuple[str, tuple[str, ...]]]:
    """(imported module path, names taken from it) for each import statement of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield source, tuple(alias.name for alias in node.names)


def _known_prefix(name: str, modules: Mapping[str, Path]) -> str | None:
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """{module: the modules of ours it imports} (self-imports dropped)."""
    modules = module_files(root, packages)
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for source, names in _imported_names(module, path):
            targets = []
            for name in names:
                if f"{source}.{name}" in modules:
                    targets.append(f"{source}.{name}")
                else:
                    targets.append(source)
            if not names:
                targets.append(source)
            for target in targets:
                known = _known_prefix(target, modules)
                if known is not None and known != module:
                    graph[module].add(known)
    return graph


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def one_cycle(graph: Mapping[str, set[str]], component: list[str]) -> list[str]:
    """A shortest closed path through the first module of `component` (for the failure message)."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for successor in sorted(graph[node] & members):
            if successor == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if successor not in came_from:
                came_from[successor] = node
                queue.append(successor)
    return component  # pragma: no cover - a component always closes through its first member


def cycles_report(graph: Mapping[str, set[str]]) -> str:
    lines = []
    for component in strongly_connected(graph):
        lines.append(f"{len(component)} modules: {', '.join(component)}")
        lines.append(f"    e.g. {' -> '.join(one_cycle(graph, component))}")
    return "\n".join(lines)


def test_the_shipped_packages_import_each_other_without_a_cycle():
    graph = import_graph(REPO_ROOT, SHIPPED)
    assert len(graph) > 300  # the walk found the code (an empty graph has no cycle either)
    assert "training_bridge.services.runs" in graph["training_bridge.tasks"]
    report = cycles_report(graph)
    if report:
        pytest.fail(
            f"file-level import cycles (each: its modules, then one closed path):\n{report}"
        )


def _package(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_planted_cycle_is_found_with_lazy_and_relative_imports(tmp_path):
    _package(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/services.py": "def send():\n    from app.tasks import run  # lazy\n",
            "app/tasks.py": "from . import services\n",
            "app/sub/__init__.py": "",
            "app/sub/leaf.py": "from ..services import send\nimport app.sub\nimport json\n",
            "app/migrations/0001_initial.py": "from app import tasks\n",
        },
    )
    graph = import_graph(tmp_path, ["app"])
    assert graph["app.tasks"] == {"app.services"}
    assert graph["app.services"] == {"app.tasks"}
    # `from ..services import send`: send is no module, so the edge goes to app.services.
    assert graph["app.sub.leaf"] == {"app.services", "app.sub"}
    assert "app.migrations.0001_initial" not in graph
    assert strongly_connected(graph) == [["app.services", "app.tasks"]]
    assert cycles_report(graph) == (
        "2 modules: app.services, app.tasks\n    e.g. app.services -> app.tasks -> app.services"
    )


def test_a_graph_without_a_cycle_reports_none(tmp_path):
    _package(
        tmp_path,
        {
            "app/__init__.py": "from app import models\n",
            "app/models.py": "",
            "app/services.py": "from app.models import *\n",
            "app/tasks.py": "def run():\n    from app import services\n",
        },
    )
    graph = import_graph(tmp_path, ["app"])
    assert graph["app.tasks"] == {"app.services"}
    assert strongly_connected(graph) == []
    assert cycles_report(graph) == ""
