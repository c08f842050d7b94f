"""The bench report's terminal table."""

from __future__ import annotations

from semsched.bench.report import bench_table
from semsched.sim.runner import run_policy
from semsched.workloads import build_workload


def test_request_latencies_share_one_unit_in_the_table() -> None:
    """TTFT of milliseconds beside E2E of seconds: one unit for both (never "TTFT (ms)" beside "E2E (s)")."""
    run = run_policy(build_workload("azure-conv", rate_per_s=4.0, duration_s=30.0, seed=0), "fcfs")
    overall = run.summary.overall
    ttft, e2e = overall.metric("ttft_median"), overall.metric("e2e_p99")
    assert ttft is not None and e2e is not None and ttft < 1.0 and e2e > 10.0  # ms and s, each alone
    headers = {str(c.header).split("\n")[0] + " " + str(c.header).split("\n")[1]: str(c.header).split("\n")[-1]
               for c in bench_table(run.summary).columns if str(c.header).count("\n") == 2}
    assert headers["TTFT p50"] == headers["E2E p99"] == headers["E2E p50"] == headers["TTFT p99"]
