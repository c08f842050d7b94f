"""Each experiment's ``--quick`` report, computed once per test session and shared by the tests that read it.

``quick_reports.path(name)`` runs ``semsched reproduce NAME --quick`` with the experiment's options of
:data:`QUICK_OPTIONS` the first time it is asked for, into a session temporary directory, and returns that
directory every later time. tests/experiments/test_reproduce.py checks every experiment's report through it (its
files and sections, requests.csv) and each experiment's own module (test_semantic.py, ...) recomputes the report's
numbers from the same run, so that no ``--quick`` run is made twice. Tests read a shared report and never write to
it; a test that needs a run of its own (another seed, a failing run) still calls ``main`` itself.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pytest

from semsched.cli import main

#: the options besides ``--quick`` and ``--out`` each shared report is made with: the seeds the experiments' own
#: modules check (so that ``--seed`` is seen to reach the report), and for proserve a trace of the user's
#: (``--workload``, written by :func:`mooncake_trace`). An experiment not named here runs with its defaults.
QUICK_OPTIONS: dict[str, list[str]] = {
    "demo": ["--seed", "3"],
    "laps-sd": ["--seed", "2"],
    "proserve": ["--seed", "1", "--workload", "{trace}"],
    "sagesched": ["--seed", "1"],
    "semantic": ["--seed", "2"],
}


def mooncake_trace(path: Path) -> Path:
    """A Mooncake-format trace (timestamp in ms, input and output lengths) of 150 requests, as a user would
    bring one."""
    rng = random.Random(7)
    lines = [json.dumps({"timestamp": 250 * i + rng.randrange(200), "input_length": rng.randrange(50, 1500),
                         "output_length": rng.randrange(5, 300), "hash_ids": [i]}) for i in range(150)]
    path.write_text("\n".join(lines) + "\n")
    return path


class QuickReports:
    """The session's ``--quick`` reports, made on first use (see the module's docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trace = mooncake_trace(root / "mooncake.jsonl")
        self._made: dict[str, Path] = {}
        self._failed: set[str] = set()

    def options(self, name: str) -> list[str]:
        return [option.replace("{trace}", str(self.trace)) for option in QUICK_OPTIONS.get(name, [])]

    def path(self, name: str) -> Path:
        if name in self._failed:
            pytest.fail(f"semsched reproduce {name} --quick failed earlier in this session")
        if name not in self._made:
            out = self.root / name
            try:
                assert main(["reproduce", name, "--quick", "--out", str(out), *self.options(name)]) == 0
            except BaseException:
                self._failed.add(name)
                raise
            self._made[name] = out
        return self._made[name]


@pytest.fixture(scope="session")
def quick_reports(tmp_path_factory: pytest.TempPathFactory) -> QuickReports:
    return QuickReports(tmp_path_factory.mktemp("quick-reports"))


# ---- a quick report's files, for the test module that names its ``report`` fixture (the report's directory) ----
@pytest.fixture(scope="module")
def results(report: Path) -> dict[str, Any]:
    """The module's report's ``results.json``."""
    return dict(json.loads((report / "results.json").read_text()))


@pytest.fixture(scope="module")
def figures(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Its figures by id."""
    return {f["id"]: f for f in results["figures"]}


@pytest.fixture(scope="module")
def rows(report: Path) -> list[dict[str, str]]:
    """Its ``requests.csv`` rows."""
    with (report / "requests.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))
