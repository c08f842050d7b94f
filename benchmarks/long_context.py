"""Long-context traffic (issue 28): does every policy serve every request, with what TDG, at what wall time?

Replays a long-context trace (default: ``../shared/data/long_context_synthetic.jsonl``, prompts of 200 to 120,000
tokens) at each ``--rates`` x ``--seeds`` point on one engine of ``--profile`` and runs every ``--policies`` entry
on the same requests. Per point and policy: requests finished / rejected / dropped (a stall stops the run with
an error, so none can hide), the TDG ratio, and the simulation's wall time as a ratio to ``fcfs``'s at the same
point (process CPU time, so other load on the machine counts less). The summary line gives, per policy, the
range over points of TDG minus the best baseline's and of the wall ratio.

Every number printed is measured in this run. Run: ``.venv/bin/python benchmarks/long_context.py``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import ResultTable, dump_json, make_console

from semsched.core.request import RequestState
from semsched.metrics import TDGWeights
from semsched.sim.runner import ClusterSpec, run_policy
from semsched.workloads import build_workload

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "long_context_synthetic.jsonl"
#: PROSERVE's baselines (seed 001) and fcfs, the wall-time reference
DEFAULT_POLICIES = "fcfs,vllm-fcfs,sarathi-fcfs,vtc,fairbatching,slide-batching"
CANDIDATE = "slide-batching"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--profile", default="a100-qwen1.5-7b-batch")
    parser.add_argument("--policies", default=DEFAULT_POLICIES, help="comma-separated; must include fcfs")
    parser.add_argument("--rates", default="0.05,0.1,0.2", help="requests/s, comma-separated")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--duration", type=float, default=1200.0, help="seconds of arrivals")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    policies = args.policies.split(",")
    if "fcfs" not in policies:
        parser.error("--policies: must include fcfs (the wall-time reference)")
    rates = [float(x) for x in args.rates.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    console = make_console()
    table = ResultTable(
        f"long-context trace on {args.profile}: every request served?",
        ("policy", "rate/s", "seed", "requests", "finished", "rejected", "dropped", "TDG ratio", "wall vs fcfs"),
    )
    rows = []
    for rate in rates:
        for seed in seeds:
            workload = build_workload(args.trace, rate_per_s=rate, duration_s=args.duration, seed=seed)
            weights = TDGWeights.paper_defaults(workload.to_requests())
            point = {}
            for policy in policies:
                started = time.process_time()
                run = run_policy(workload, policy, ClusterSpec(profile=args.profile), tdg_weights=weights)
                cpu_s = time.process_time() - started
                states = [r.state for r in run.requests]
                point[policy] = {
                    "policy": policy, "rate_per_s": rate, "seed": seed, "requests": len(states),
                    "finished": states.count(RequestState.FINISHED),
                    "rejected": states.count(RequestState.REJECTED),
                    "dropped": states.count(RequestState.DROPPED),
                    "tdg_ratio": run.summary.overall.metric("tdg_ratio"), "cpu_s": cpu_s,
                }
            for policy, row in point.items():
                row["wall_vs_fcfs"] = row["cpu_s"] / point["fcfs"]["cpu_s"]
                tdg = row["tdg_ratio"]
                table.add(policy, f"{rate:g}", str(seed), str(row["requests"]), str(row["finished"]),
                          str(row["rejected"]), str(row["dropped"]), "—" if tdg is None else f"{tdg:.1%}",
                          f"{row['wall_vs_fcfs']:.1f}x")
                rows.append(row)
    table.print(console)
    _summary(console, rows, policies)
    if args.json is not None:
        dump_json(args.json, {"trace": args.trace, "profile": args.profile, "results": rows})


def _summary(console: object, rows: list[dict[str, object]], policies: list[str]) -> None:
    baselines = [p for p in policies if p != CANDIDATE]
    if CANDIDATE not in policies or not baselines:
        return
    gaps, walls, short = [], [], 0
    for row in rows:
        if row["policy"] != CANDIDATE:
            continue
        same = [r for r in rows if r["rate_per_s"] == row["rate_per_s"] and r["seed"] == row["seed"]]
        best = max(float(r["tdg_ratio"] or 0.0) for r in same if r["policy"] in baselines)  # type: ignore[arg-type]
        most = max(int(r["finished"]) for r in same if r["policy"] in baselines)  # type: ignore[call-overload]
        gaps.append(float(row["tdg_ratio"] or 0.0) - best)  # type: ignore[arg-type]
        walls.append(float(row["wall_vs_fcfs"]))  # type: ignore[arg-type]
        short += int(row["finished"]) < most  # type: ignore[call-overload]
    print(f"{CANDIDATE}: TDG ratio minus the best baseline's {min(gaps):+.1%} to {max(gaps):+.1%} over "
          f"{len(gaps)} points; points where it finished fewer requests than a baseline: {short}; "
          f"wall time {min(walls):.1f}x to {max(walls):.1f}x fcfs's (target: at most 3x)")


if __name__ == "__main__":
    main()
