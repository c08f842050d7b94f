"""The compiled core (issue 29): which modules mypyc compiles, and whether this process runs them.

``./dev`` (``pip install -e .``, through ``setup.py``) compiles the modules in :data:`COMPILED_MODULES` with mypyc
into extension modules beside their sources, and records each source's SHA-256 in :data:`BUILD_RECORD`. Python
imports an extension module before a source of the same name, so the compiled core is what runs when it is there.
The sources stay the reference: with ``SEMSCHED_PURE_PYTHON=1``, when no build is there, or when any source
differs from the one that was compiled (a stale build: edited since the last ``./dev``), every module of the list
is imported from its ``.py`` instead, all of them together (compiled modules call each other natively, so they
are never mixed with interpreted ones). Both paths give bit-identical results (``tests/test_compiled.py``).

This module imports only the standard library: ``setup.py`` reads it before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

#: set to 1 to run the pure-Python sources even when the compiled core is built (also read by ``setup.py``: then
#: nothing is compiled)
PURE_PYTHON_ENV = "SEMSCHED_PURE_PYTHON"
#: the core's hot path: requests and their token records, KV blocks, batch plans, the scheduler, the event loop,
#: its executor and its monitor, the analytic latency model that prices steps, and the policies' per-step passes
#: over the running requests (``semsched.policies.passes``). Policies stay interpreted classes (they subclass
#: ``semsched.core.policy.Policy``, which stays interpreted too) and call those passes. Compiled, ``Request`` is a
#: native class: its attributes hold only their declared types (its constructor checks every static field first,
#: so a caller still gets the ``InvalidRequestError`` that names the field), and it takes no weak reference
COMPILED_MODULES = (
    "semsched.core.request",
    "semsched.core.emission",
    "semsched.core.kv",
    "semsched.core.plan",
    "semsched.core.displacement",
    "semsched.core.scheduler",
    "semsched.sim.executor",
    "semsched.sim.monitor",
    "semsched.sim.engine",
    "semsched.latency.analytic",
    "semsched.policies.passes",
)
BACKEND = "mypyc"
PACKAGE_DIR = Path(__file__).resolve().parent
#: written by ``setup.py`` when it compiles: ``{"sources": {module: sha256 of its .py}}`` (not checked in)
BUILD_RECORD = PACKAGE_DIR / "_compiled_build.json"


@dataclass(frozen=True)
class CompiledStatus:
    """Whether this process runs the compiled core, and if not, why."""

    in_use: bool
    reason: str  # one phrase: "built", "SEMSCHED_PURE_PYTHON=1", "not built", "stale: ..."

    def describe(self) -> str:
        """The line ``semsched --version`` prints."""
        answer = "yes" if self.in_use else f"no ({self.reason})"
        return f"compiled core ({BACKEND}): {answer}"


def source_path(module: str) -> Path:
    """The ``.py`` source of ``module`` (one of :data:`COMPILED_MODULES`)."""
    return PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_digest(module: str) -> str:
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def extension_path(module: str) -> Path | None:
    """The compiled extension module of ``module`` beside its source, if one was built."""
    source = source_path(module)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_name(source.stem + suffix)
        if candidate.exists():
            return candidate
    return None


def write_build_record(digests: dict[str, str]) -> None:
    """Record the SHA-256 of every compiled source (``setup.py`` calls it once the extensions are built, with the
    digests taken when mypyc read the sources)."""
    record = {"backend": BACKEND, "sources": digests}
    BUILD_RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def pure_python_asked() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def _decide() -> CompiledStatus:
    if pure_python_asked():
        return CompiledStatus(False, f"{PURE_PYTHON_ENV}={os.environ[PURE_PYTHON_ENV]}")
    return build_status()


def build_status() -> CompiledStatus:
    """Whether a build of the current sources is there (``in_use``: it would be used), whatever the environment."""
    missing = [m for m in COMPILED_MODULES if extension_path(m) is None]
    if len(missing) == len(COMPILED_MODULES):
        return CompiledStatus(False, "not built; ./dev builds it")
    if missing:
        return CompiledStatus(False, f"incomplete build: {', '.join(missing)} not compiled; rerun ./dev")
    try:
        built = json.loads(BUILD_RECORD.read_text())["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        return CompiledStatus(False, f"no build record ({BUILD_RECORD.name}); rerun ./dev")
    changed = [m for m in COMPILED_MODULES if built.get(m) != source_digest(m)]
    if changed:
        names = ", ".join(str(source_path(m).relative_to(PACKAGE_DIR.parent)) for m in changed)
        return CompiledStatus(False, f"stale build: {names} changed since it was compiled; rerun ./dev")
    return CompiledStatus(True, "built")


class _SourceFinder:
    """Meta-path finder that imports the compiled modules from their ``.py`` sources (the pure-Python path)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


_STATUS: CompiledStatus | None = None


def activate() -> CompiledStatus:
    """Decide once per process (``semsched/__init__`` calls it, before any core module is imported): keep the
    compiled modules, or route every one of them to its source."""
    global _STATUS
    if _STATUS is None:
        _STATUS = _decide()
        if not _STATUS.in_use and any(extension_path(m) is not None for m in COMPILED_MODULES):
            sys.meta_path.insert(0, _SourceFinder())
    return _STATUS


def status() -> CompiledStatus:
    """Whether the core modules this process imported are the compiled ones (checked, not assumed)."""
    decided = activate()
    loaded = [sys.modules[m] for m in COMPILED_MODULES if m in sys.modules]
    if decided.in_use and any(not is_extension(module) for module in loaded):
        return CompiledStatus(False, "built, but a core module was imported from its source")
    return decided


def is_extension(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from a compiled extension (by its file name: a module that mypyc's shared
    library initialised through another one may have a ``__file__`` with a doubled package directory)."""
    file = getattr(module, "__file__", None) or ""
    return file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def main(argv: Sequence[str] | None = None) -> int:
    """Print whether the core runs compiled; ``--check`` exits 1 when ``./dev`` should compile it (no build of the
    current sources, and ``SEMSCHED_PURE_PYTHON`` not set). ``./dev`` runs it as ``python -c`` (``python -m`` would
    import this module twice: the package imports it first)."""
    parser = argparse.ArgumentParser(prog="semsched.compiled", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when the core needs compiling")
    args = parser.parse_args(argv)
    if args.check:
        return 0 if pure_python_asked() or build_status().in_use else 1
    print(status().describe())
    return 0
