"""Smoke tests for ``benchmarks/``: each script runs end to end on a tiny configuration and writes its JSON.

The numbers are not checked (they are machine-dependent); the tests guard against the scripts rotting as the
APIs they drive change.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_script(name: str, *args: str, json_path: Path) -> dict[str, object]:
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args, "--json", str(json_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "| policy |" in completed.stdout  # the Markdown table
    payload: dict[str, object] = json.loads(json_path.read_text())
    return payload


def test_scheduler_overhead_smoke(tmp_path: Path) -> None:
    payload = run_script(
        "scheduler_overhead.py",
        "--policies",
        "fcfs,priority-preempt:exclusive=true",
        "--queue-sizes",
        "10,100",
        "--running",
        "8",
        "--repeats",
        "5",
        "--warmup",
        "1",
        json_path=tmp_path / "overhead.json",
    )
    results = payload["results"]
    assert isinstance(results, list) and len(results) == 4
    assert all(len(r["step_ms"]) == 5 for r in results)


@pytest.mark.data
def test_sim_throughput_smoke(tmp_path: Path) -> None:
    payload = run_script(
        "sim_throughput.py", "--policies", "fcfs", "--num-requests", "200", json_path=tmp_path / "sim.json"
    )
    results = payload["results"]
    assert isinstance(results, list) and len(results) == 1
    assert results[0]["identical"] is True
