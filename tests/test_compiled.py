"""The compiled core (semsched/compiled.py, issue 29): the CLI says which core runs, ``SEMSCHED_PURE_PYTHON=1``
runs the sources, a stale build is never used, and the compiled and the pure-Python core give the same results
bit for bit: every registered policy (and the golden configurations) on every golden scenario
(tests/sim/golden.py)."""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from semsched import compiled
from semsched.cli import main
from tests.sim.golden import GOLDEN_SCENARIOS, run, specs

ROOT = Path(__file__).resolve().parents[1]
STATUS = compiled.status()
needs_compiled_core = pytest.mark.skipif(
    not STATUS.in_use, reason=f"the compiled core is not in use in this process: {STATUS.reason}"
)


def _python(code: str, *, pure: bool) -> str:
    """stdout of ``python -c code`` from the repository root, on the pure-Python path or not."""
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_PYTHON_ENV}
    if pure:
        env[compiled.PURE_PYTHON_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_pure_python_imports_every_core_module_from_its_source() -> None:
    out = _python(
        "import importlib, json; from semsched import compiled; "
        "files = [importlib.import_module(m).__file__ for m in compiled.COMPILED_MODULES]; "
        "print(json.dumps([compiled.status().describe(), files]))",
        pure=True,
    )
    described, files = json.loads(out)
    assert described == f"compiled core (mypyc): no ({compiled.PURE_PYTHON_ENV}=1)"
    assert files == [str(compiled.source_path(m)) for m in compiled.COMPILED_MODULES]


@needs_compiled_core
def test_every_core_module_runs_compiled_when_the_build_is_current() -> None:
    for name in compiled.COMPILED_MODULES:
        assert compiled.is_extension(importlib.import_module(name)), name


def test_version_says_which_core_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("semsched ")
    assert STATUS.describe() in out
    assert ("compiled core (mypyc): yes" in out) is STATUS.in_use


def _fake_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, digests: dict[str, str]) -> None:
    """Every core module 'compiled' (an extension path for each), with ``digests`` as the build record."""
    monkeypatch.setattr(compiled, "extension_path", lambda module: tmp_path / f"{module}.so")
    record = tmp_path / "_compiled_build.json"
    record.write_text(json.dumps({"backend": "mypyc", "sources": digests}))
    monkeypatch.setattr(compiled, "BUILD_RECORD", record)
    monkeypatch.delenv(compiled.PURE_PYTHON_ENV, raising=False)


def test_a_build_of_the_current_sources_is_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_build(monkeypatch, tmp_path, {m: compiled.source_digest(m) for m in compiled.COMPILED_MODULES})
    assert compiled._decide() == compiled.CompiledStatus(True, "built")


def test_a_build_of_an_edited_source_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    digests = {m: compiled.source_digest(m) for m in compiled.COMPILED_MODULES}
    digests["semsched.core.kv"] = "0" * 64  # kv.py was compiled before its last edit
    _fake_build(monkeypatch, tmp_path, digests)
    decided = compiled._decide()
    assert not decided.in_use
    assert decided.reason == "stale build: semsched/core/kv.py changed since it was compiled; rerun ./dev"


def test_no_build_and_a_build_without_its_record_are_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(compiled.PURE_PYTHON_ENV, raising=False)
    monkeypatch.setattr(compiled, "extension_path", lambda module: None)
    assert compiled._decide() == compiled.CompiledStatus(False, "not built; ./dev builds it")
    monkeypatch.setattr(compiled, "extension_path", lambda module: tmp_path / f"{module}.so")
    monkeypatch.setattr(compiled, "BUILD_RECORD", tmp_path / "missing.json")
    assert compiled._decide().reason == "no build record (missing.json); rerun ./dev"


@pytest.fixture(scope="module")
def pure_results() -> dict[str, Any]:
    """The golden digests of every spec and scenario, computed in a process on the pure-Python path."""
    out = _python(
        "import json; from semsched import compiled; from tests.sim.golden import compute; "
        "assert not compiled.status().in_use; print(json.dumps(compute()))",
        pure=True,
    )
    results: dict[str, Any] = json.loads(out)
    return results


@needs_compiled_core
@pytest.mark.slow
@pytest.mark.parametrize("spec", specs())
def test_the_compiled_and_the_pure_python_core_give_identical_results(
    spec: str, pure_results: dict[str, Any]
) -> None:
    here = {s.name: run(spec, s) for s in GOLDEN_SCENARIOS}  # this process: the compiled core
    pure = pure_results[spec]
    moved = {name: (pure[name], here[name]) for name in here if pure[name] != here[name]}
    assert not moved, f"{spec}: the compiled core's results differ from pure Python's (pure, compiled): {moved}"


def test_the_benchmark_runs_both_paths_and_finds_them_identical(tmp_path: Path) -> None:
    """benchmarks/compiled_core.py end to end on 200 requests (its numbers are not checked: machine-dependent)."""
    out = tmp_path / "compiled.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compiled_core.py"), "--num-requests", "200", "--repeats", "1",
         "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "| path |" in done.stdout  # the Markdown table
    payload = json.loads(out.read_text())
    assert payload["identical"] is True
    assert [r["compiled"] for r in payload["runs"]["pure"]] == [
        f"compiled core (mypyc): no ({compiled.PURE_PYTHON_ENV}=1)"
    ]
    assert [r["compiled"] for r in payload["runs"]["compiled"]] == [STATUS.describe()]


def test_what_a_process_pool_ships_survives_pickling() -> None:
    """A grid's point goes to a worker (a ClusterSpec, reservations in its SchedulerConfig) and its run comes back
    (a PolicyRun: requests, SimResult, summary): both pickle on either core."""
    from semsched.core.kv import Reservation
    from semsched.core.scheduler import SchedulerConfig
    from semsched.sim.runner import ClusterSpec, run_policy
    from semsched.workloads import build_workload

    cluster = ClusterSpec(scheduler=SchedulerConfig(num_gpu_blocks=512, reservations=(Reservation(0, 8),)))
    assert pickle.loads(pickle.dumps(cluster)) == cluster
    run = run_policy(build_workload("azure-conv-trace", rate_per_s=3.5, seed=0, num_requests=50), "fcfs", cluster)
    back = pickle.loads(pickle.dumps(run))
    assert back.summary.to_dict() == run.summary.to_dict()
    assert [r.token_times_s().tolist() for r in back.result.requests] == [
        r.token_times_s().tolist() for r in run.result.requests
    ]
