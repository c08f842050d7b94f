"""The modules of semsched/workloads import each other without a cycle (tiers.py and workload.py once did)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "semsched" / "workloads"


def _sibling_imports(path: Path) -> set[str]:
    """The other semsched.workloads modules ``path`` imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("semsched.workloads."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("semsched.workloads."))
    return found


def test_no_import_cycle_inside_workloads() -> None:
    graph = {path.stem: _sibling_imports(path) for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    assert "tiers" not in graph["workload"] and "registry" in graph  # the graph is what we think it is
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for imported in graph.get(module, set()):
            visit(imported, (*path, module))
        done.add(module)

    for module in graph:
        visit(module, ())
