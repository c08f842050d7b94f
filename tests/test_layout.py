"""The package layout's import rules (docs/architecture.md), checked on every module's import statements.

* ``semsched/core``: the standard library, numpy, ``mypy_extensions`` (mypyc's class markers for the compiled core)
  and ``semsched.core`` only;
* ``semsched/policies``: also ``semsched.policies``, ``semsched.latency`` (policies that estimate time take a
  latency model) and ``yaml`` (a policy reads its own configuration files); never the simulator, vLLM or
  predictors;
* ``semsched/vllm`` (the adapter users load into vLLM): never the simulator, workloads, metrics, the calibration
  lab or the experiments.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "semsched"
STDLIB = frozenset(sys.stdlib_module_names)


def imported_modules(path: Path) -> set[str]:
    """Every absolute module a file imports, at any depth (lazy imports inside functions included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(package: str, allowed: tuple[str, ...] = (), forbidden: tuple[str, ...] = ()) -> list[str]:
    """``file: module`` for each import under ``semsched/<package>`` that breaks the rule.

    With ``allowed``, only the standard library and those prefixes may be imported (``ImportFrom`` of a package
    names its members too, so ``from semsched.core import tiers`` counts as ``semsched.core``)."""
    found = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for name in sorted(imported_modules(path)):
            top = name.split(".")[0]
            if allowed:
                ok = top in STDLIB or top == "__future__" or _under(name, allowed)
                # "from semsched.core.x import Name" also yields "semsched.core.x.Name": judged by its module
                if not ok and "." in name and _under(name.rsplit(".", 1)[0], allowed):
                    ok = True
            else:
                ok = not _under(name, forbidden)
            if not ok:
                found.append(f"{path.relative_to(PACKAGE.parent)}: {name}")
    return found


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        ("core", ("numpy", "mypy_extensions", "semsched.core")),
        ("policies", ("numpy", "yaml", "semsched.core", "semsched.policies", "semsched.latency")),
    ],
)
def test_inner_packages_import_only_what_they_may(package: str, allowed: tuple[str, ...]) -> None:
    assert violations(package, allowed=allowed) == []


GATEWAY_ALLOWED = (
    "numpy", "yaml", "aiohttp", "httpx", "fastapi", "starlette", "pydantic", "prometheus_client", "uvicorn",
    "tokenizers", "semsched.core", "semsched.policies", "semsched.latency", "semsched.predict",
    "semsched.sim.router", "semsched.sim.prefix_router", "semsched.vllm.xargs", "semsched.gateway",
    "opentelemetry",  # tracing (issue 32)
    "redis",  # state shared by replicas (issue 32)
)


def test_gateway_imports_no_simulator_engine_lab_or_experiment() -> None:
    """The gateway serves: it takes the routers, policies' guard, predictors and the request validator, never
    the event loop of the simulator, the calibration lab, the experiments or vLLM itself."""
    assert violations("gateway", allowed=GATEWAY_ALLOWED) == []


def test_vllm_adapter_imports_no_lab() -> None:
    forbidden = (
        "semsched.sim",
        "semsched.workloads",
        "semsched.metrics",
        "semsched.calibrate",
        "semsched.experiments",
    )
    assert violations("vllm", forbidden=forbidden) == []


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from semsched.sim.engine import Simulation\n    import torch\n")
    names = imported_modules(module)
    assert "semsched.sim.engine" in names and "torch" in names
