"""``semsched reproduce --workers N`` and ``--ray``: the same report, byte for byte, as ``--workers 1``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from semsched.cli import main
from semsched.cli.common import command_line

#: what may change between two runs of the same code: the date (UTC, to the minute) and the checkout's commit
#: (another commit may land in between); the rest of every file must be the same byte for byte
_WHEN = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d|(?<=commit: `)[^`]*|(?<=\"commit\": \")[^\"]*")


def _files(out: Path) -> dict[str, bytes]:
    return {str(path.relative_to(out)): _WHEN.sub(b"WHEN", path.read_bytes())
            for path in sorted(out.rglob("*")) if path.is_file()}


def _reproduce(out: Path, *options: str) -> dict[str, bytes]:
    assert main(["reproduce", "demo", "--quick", "--out", str(out), *options]) == 0
    return _files(out)


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return _reproduce(tmp_path_factory.mktemp("workers") / "demo", "--workers", "1")


def test_a_pool_writes_the_same_report(one_worker: dict[str, bytes], tmp_path: Path) -> None:
    pooled = _reproduce(tmp_path / "demo", "--workers", "2")
    assert {"report.md", "results.json", "requests.csv"} <= set(one_worker)
    assert pooled.keys() == one_worker.keys()
    for name, content in one_worker.items():
        assert pooled[name] == content, f"{name} differs between --workers 1 and --workers 2"


@pytest.mark.slow
def test_ray_writes_the_same_report(one_worker: dict[str, bytes], tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the [ray] extra (./dev test installs it)")
    on_ray = _reproduce(tmp_path / "demo", "--ray", "--workers", "2")  # a local Ray of 2 CPUs
    assert on_ray.keys() == one_worker.keys()
    for name, content in one_worker.items():
        assert on_ray[name] == content, f"{name} differs between --workers 1 and --ray"


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_workers_below_one_is_refused(workers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["reproduce", "demo", "--quick", "--out", str(out), f"--workers={workers}"]) == 2
    err = capsys.readouterr().err
    assert "--workers: must be >= 1" in err and "Traceback" not in err
    assert not out.exists()


def test_the_recorded_command_leaves_out_how_it_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["semsched", "reproduce", "demo", "--workers", "2", "--quick", "--ray", "ray://head:10001",
            "--progress", "--workers=3", "--ray", "--seed", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    assert command_line() == "semsched reproduce demo --quick --seed 1"
