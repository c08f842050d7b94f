"""``semsched sweep --workers N``: every (rate, policy) run in a pool, the same outputs as ``--workers 1``."""

from __future__ import annotations

from pathlib import Path

import pytest

from semsched.cli import main

SWEEP = ["sweep", "--policy", "fcfs,sjf,edf:deadline=e2e", "--rates", "2,5", "--duration", "30"]


def test_a_pool_writes_the_same_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for workers in ("1", "2"):
        out = tmp_path / workers
        assert main([*SWEEP, "--out", str(out), "--workers", workers]) == 0
        outputs.append({path.name: path.read_bytes() for path in sorted(out.iterdir())})
        outputs.append({"table": capsys.readouterr().out.replace(str(out), "OUT").encode()})
    assert outputs[0] and set(outputs[0]) == {"sweep.json", "sweep_e2e_mean.png"}
    assert outputs[0] == outputs[2], "sweep.json or the plot differs between --workers 1 and 2"
    assert outputs[1] == outputs[3], "the printed table differs between --workers 1 and 2"


def test_workers_must_be_a_positive_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SWEEP, "--out", str(tmp_path / "out"), "--workers", "0"]) == 2
    assert "--workers: must be >= 1 (got 0)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*SWEEP, "--workers", "two"])
    assert "--workers" in capsys.readouterr().err
