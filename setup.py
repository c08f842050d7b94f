"""Build hook (issue 29): compiles the core (``semsched.compiled.COMPILED_MODULES``) with mypyc into extension
modules beside their sources; ``pip install -e .`` (``./dev``) runs it. Everything else is in pyproject.toml.

``SEMSCHED_PURE_PYTHON=1`` at build time compiles nothing: the package then runs from its sources only.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
#: the setup.py commands that build extension modules (pip's metadata steps run setup.py too: no compiling there)
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def _compiled_module() -> ModuleType:
    """semsched/compiled.py, loaded by path: the package's dependencies are not installed at build time."""
    spec = importlib.util.spec_from_file_location("_semsched_compiled", ROOT / "semsched" / "compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module


COMPILED = _compiled_module()
#: the digests of the sources as mypyc read them, recorded once the extensions are built
DIGESTS: dict[str, str] = {}


class BuildAndRecord(build_ext):
    """``build_ext`` that writes the build record (semsched/_compiled_build.json) only after every extension was
    built, so a failed build never passes for a current one."""

    def run(self) -> None:
        super().run()
        if DIGESTS:
            COMPILED.write_build_record(DIGESTS)


def ext_modules() -> list[Any]:
    """mypyc's extensions, unless this command builds none, pure Python is asked for, or the extensions beside the
    sources are a build of these very sources (``./dev test`` reinstalls the package with other extras: no second
    compile)."""
    if not BUILD_COMMANDS.intersection(sys.argv[1:]) or COMPILED.pure_python_asked():
        return []
    if COMPILED.build_status().in_use:
        return []
    from mypyc.build import mypycify

    modules = list(COMPILED.COMPILED_MODULES)
    DIGESTS.update({module: COMPILED.source_digest(module) for module in modules})
    sources = [str(COMPILED.source_path(m).relative_to(ROOT)) for m in modules]
    return list(mypycify(sources, opt_level="3", group_name="semsched._core"))


setup(ext_modules=ext_modules(), cmdclass={"build_ext": BuildAndRecord})
