"""semsched.sim.parallel: a pool gives the runs of running each point here, in the points' order, and a failed
point names itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

from semsched.sim import parallel
from semsched.sim.parallel import InProcess, PointError, ProcessPool, SimPoint, point_runner
from semsched.sim.runner import ClusterSpec, PolicyRun
from semsched.sim.runner import run_policy as real_run_policy
from semsched.workloads import build_workload


def _points() -> list[SimPoint]:
    cluster = ClusterSpec()
    points = []
    for seed in (0, 1):
        workload = build_workload("azure-conv", rate_per_s=4.0, duration_s=20.0, seed=seed)
        points += [SimPoint(f"seed={seed} {policy}", workload, policy, cluster)
                   for policy in ("fcfs", "sjf", "edf")]
    return points


def _outcomes(run: PolicyRun) -> list[tuple[object, ...]]:
    return [(r.request_id, r.first_token_time_s, r.finish_time_s, r.num_preemptions) for r in run.requests]


class _Progress:
    def __init__(self) -> None:
        self.total = 0
        self.labels: list[str] = []

    def planned(self, count: int) -> None:
        self.total += count

    def finished(self, label: str) -> None:
        self.labels.append(label)


def test_a_pool_gives_the_runs_of_running_here_in_the_points_order() -> None:
    points = _points()
    here = InProcess().run(points)
    progress = _Progress()
    pool = ProcessPool(2)
    try:
        there = pool.run(points, progress)
    finally:
        pool.close()
    assert [run.policy for run in there] == [point.policy for point in points]
    for mine, theirs in zip(here, there, strict=True):
        assert _outcomes(mine) == _outcomes(theirs)
        assert mine.summary == theirs.summary
    assert progress.total == len(points) and sorted(progress.labels) == sorted(p.label for p in points)


def test_a_bad_point_is_named() -> None:
    workload = build_workload("azure-conv", rate_per_s=4.0, duration_s=10.0, seed=0)
    points = [SimPoint("good", workload, "fcfs", ClusterSpec()),
              SimPoint("fig9 bad seed=3", workload, "no-such-policy", ClusterSpec())]
    for workers in (1, 2):
        named = "'fig9 bad seed=3' \\(no-such-policy on"
        with pytest.raises(PointError, match=named), point_runner(workers) as runner:
            runner.run(points)


def test_a_bug_in_a_worker_keeps_its_type_and_names_the_point(monkeypatch: pytest.MonkeyPatch) -> None:

    def broken(workload, policy, *args, **kwargs):  # type: ignore[no-untyped-def]
        if policy == "sjf":
            raise ZeroDivisionError("a bug")
        return real_run_policy(workload, policy, *args, **kwargs)

    monkeypatch.setattr(parallel, "run_policy", broken)  # the forked workers inherit it
    workload = build_workload("azure-conv", rate_per_s=4.0, duration_s=10.0, seed=0)
    points = [SimPoint(f"p {policy}", workload, policy, ClusterSpec()) for policy in ("fcfs", "sjf")]
    for workers in (1, 2):
        with pytest.raises(ZeroDivisionError) as caught, point_runner(workers) as runner:
            runner.run(points)
        assert any("'p sjf'" in note for note in getattr(caught.value, "__notes__", []))


def test_a_pool_needs_two_workers() -> None:
    with pytest.raises(ValueError, match="workers"):
        ProcessPool(1)


def test_a_failed_point_stops_the_pool_and_the_process_exits() -> None:
    """The other points are cancelled and the workers stopped: the process ends at once (it hung at exit)."""
    script = """
import sys
from semsched.sim.parallel import PointError, SimPoint, point_runner
from semsched.sim.runner import ClusterSpec
from semsched.workloads import build_workload
workload = build_workload("azure-conv", rate_per_s=4.0, duration_s=60.0, seed=0)
points = [SimPoint(f"p{i}", workload, "fcfs", ClusterSpec()) for i in range(12)]
points.insert(1, SimPoint("bad", workload, "no-such-policy", ClusterSpec()))
try:
    with point_runner(2) as runner:
        runner.run(points)
except PointError as error:
    print("failed:", error)
    sys.exit(3)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "failed: point 'bad'" in done.stdout and "InvalidStateError" not in done.stderr
