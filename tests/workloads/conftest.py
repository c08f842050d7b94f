"""Fixtures for the workload tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from semsched.workloads.traces import data_dir
from tests.workloads.factories import WorkloadFactory, make_workload


@pytest.fixture
def workload_factory() -> WorkloadFactory:
    return make_workload


@pytest.fixture
def real_data_dir() -> Path:
    """The shared data directory; data-marked tests fail loudly (never skip) if it is missing."""
    directory = data_dir()
    assert directory.is_dir(), f"shared data directory missing: {directory}"
    return directory


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``text`` to ``tmp_path / name`` and return the path."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
