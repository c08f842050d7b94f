"""Compiled core vs pure Python (issue 29): the same fcfs replay, each in a fresh process, alternating.

One replay of the trace (default azure-conv-trace at 3.5 req/s, about 80 % of the a100-qwen1.5-4b instance's
saturation rate that ``sim_throughput.py`` measures, fast-forward on) in a child process that runs the compiled
core (when it is built) and one with ``SEMSCHED_PURE_PYTHON=1``, alternating ``--repeats`` times; the fastest
run of each path counts. Per path: the simulation's wall time and process CPU time (the replay alone: not
building the requests, not summarizing them), simulated requests per wall second,
and a SHA-256 over every request's outcome, which must be the same on both paths.

Every number printed is measured in this run. Run: ``.venv/bin/python benchmarks/compiled_core.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import ResultTable, at_least, dump_json, environment, make_console, target_line

TARGET_REQUESTS_PER_WALL_S = 50_000.0
PATHS = ("compiled", "pure")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="azure-conv-trace", help="registered workload or trace path")
    parser.add_argument("--policy", default="fcfs")
    parser.add_argument("--rate", type=float, default=3.5, help="arrival rate (req/s)")
    parser.add_argument("--num-requests", type=int, default=None, help="replay only the first N requests")
    parser.add_argument("--repeats", type=at_least(1), default=2, help="runs per path; the fastest counts")
    parser.add_argument("--json", type=Path, default=None, help="write the raw numbers to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def child(args: argparse.Namespace) -> None:
    """One replay in this process; prints one JSON line."""
    from semsched.compiled import status
    from semsched.sim.runner import ClusterSpec, build_simulation
    from semsched.workloads import build_workload

    workload = build_workload(args.workload, rate_per_s=args.rate, seed=0, num_requests=args.num_requests)
    requests = workload.to_requests()
    simulation = build_simulation(args.policy, ClusterSpec(), fast_forward=True)
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    simulation.run(requests)
    wall_s, cpu_s = time.perf_counter() - wall_start, time.process_time() - cpu_start
    sha = hashlib.sha256()
    for r in requests:
        times = [float(t).hex() for t in r.token_times_s().tolist()]
        sha.update(repr((r.request_id, r.state.value, r.finish_reason, r.num_preemptions, times)).encode())
    print(json.dumps({
        "compiled": status().describe(),
        "num_requests": len(workload),
        "sim_wall_s": wall_s,
        "sim_cpu_s": cpu_s,
        "sha256": sha.hexdigest(),
    }))


def run_child(args: argparse.Namespace, path: str) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("SEMSCHED_PURE_PYTHON", None)
    if path == "pure":
        env["SEMSCHED_PURE_PYTHON"] = "1"
    command = [sys.executable, __file__, "--child", "--workload", args.workload, "--policy", args.policy,
               "--rate", str(args.rate)]
    if args.num_requests is not None:
        command += ["--num-requests", str(args.num_requests)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    args = parse_args()
    if args.child:
        child(args)
        return 0
    console = make_console()
    runs: dict[str, list[dict[str, Any]]] = {path: [] for path in PATHS}
    for repetition in range(args.repeats):
        for path in PATHS:
            result = run_child(args, path)
            runs[path].append(result)
            console.log(f"{path} #{repetition + 1}: {result['compiled']}, simulation {result['sim_wall_s']:.2f} s "
                        f"wall, {result['sim_cpu_s']:.2f} s CPU")
    best = {path: {"num_requests": runs[path][0]["num_requests"], "compiled": runs[path][0]["compiled"],
                   "sim_wall_s": min(r["sim_wall_s"] for r in runs[path]),
                   "sim_cpu_s": min(r["sim_cpu_s"] for r in runs[path])} for path in PATHS}
    table = ResultTable(
        f"{args.policy} on {args.workload} at {args.rate} req/s: compiled core vs pure Python "
        f"(best of {args.repeats})",
        ["path", "core", "requests", "sim wall s", "req/wall-s", "sim CPU s", "req/CPU-s"],
    )
    for path in PATHS:
        r = best[path]
        table.add(path, r["compiled"], f"{r['num_requests']:,}", f"{r['sim_wall_s']:.2f}",
                  f"{r['num_requests'] / r['sim_wall_s']:,.0f}", f"{r['sim_cpu_s']:.2f}",
                  f"{r['num_requests'] / r['sim_cpu_s']:,.0f}")
    table.print(console)
    identical = len({r["sha256"] for path in PATHS for r in runs[path]}) == 1
    compiled_rate = best["compiled"]["num_requests"] / best["compiled"]["sim_wall_s"]
    wall_ratio = best["pure"]["sim_wall_s"] / best["compiled"]["sim_wall_s"]
    cpu_ratio = best["pure"]["sim_cpu_s"] / best["compiled"]["sim_cpu_s"]
    console.print(f"speed-up of the compiled core: {wall_ratio:.2f}x (simulation wall), {cpu_ratio:.2f}x (CPU)")
    console.print(f"outcomes identical on both paths (every request, every token time): {identical}")
    met = compiled_rate >= TARGET_REQUESTS_PER_WALL_S
    console.print(target_line("simulated requests per wall second (compiled)", f"{compiled_rate:,.0f}",
                              f">= {TARGET_REQUESTS_PER_WALL_S:,.0f}", met))
    if args.json is not None:
        dump_json(args.json, {"args": {k: str(v) for k, v in vars(args).items()}, "environment": environment(),
                              "runs": runs, "identical": identical})
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
