"""How much any order could gain over LP-SJF in seed 004's Fig. 5 setting (batch 1, every request at t = 0).

For a burst at batch 1 the mean latency is smallest when requests run shortest *execution time* first, with no
preemption. This script runs ``lp-sjf`` three times on the same requests (replayed Spec-Bench logs, the
A100/Qwen1.5-7B profile, as ``semsched reproduce laps-sd``), changing only what it sorts by:

* ``lp-sjf``: the predicted output length, truth × U(0.8, 1.2) (the experiment's oracle with error);
* ``+ oracle acceptance``: the same prediction divided by the request's true mean tokens per round (what eq. 6
  could know at best before a request starts);
* ``sjf on true time``: the request's execution time at batch 1, its prefill and its logged rounds priced one by
  one by the simulator's own cost model (the context's growth left out, a small term): the optimal order, a lower
  bound for every scheduler, LAPS-SD included.

    .venv/bin/python benchmarks/laps_sd_bound.py [--method eagle] [--categories qa,math_reasoning,all]
        [--requests 30] [--seeds 5] [--json out.json]

Prints one Markdown table (median over seeds of each run's mean latency) and the gap of LP-SJF to the bound.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from semsched.core.plan import BatchPlan
from semsched.core.request import Request
from semsched.core.scheduler import SchedulerConfig
from semsched.latency import load_profile
from semsched.sim.runner import ClusterSpec, run_policy
from semsched.sim.speculative import SpeculativeExecutor, speculation_preset
from semsched.workloads import Workload
from semsched.workloads.spec_bench import load_spec_bench

PROFILE = "a100-qwen1.5-7b"
ENGINE = SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=8192, num_cpu_blocks=65536)
ORDERS = ("lp-sjf", "+ oracle acceptance", "sjf on true time")


def _time_s(executor: SpeculativeExecutor, prompt_tokens: int, rounds: tuple[int, ...]) -> float:
    """The engine time of one request alone: its prefill, then ``rounds``, each priced with its own yield."""
    request = Request("r", prompt_tokens=prompt_tokens, max_output_tokens=1, arrival_time_s=0.0)
    request.num_computed_tokens = prompt_tokens
    plan = BatchPlan(0.0, decode=[request], decode_context_tokens=prompt_tokens)
    prefill_s = executor.latency.step_time_s([(prompt_tokens, 0)], 0, 0)
    return prefill_s + sum(executor.round_time_s(plan, {"r": value}) for value in rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="eagle", choices=("eagle", "sps-68m"))
    parser.add_argument("--categories", default="qa,math_reasoning,all", help="comma-separated; 'all': every one")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    speculation = speculation_preset(args.method)
    cluster = ClusterSpec(profile=PROFILE, scheduler=ENGINE, speculation=speculation)
    executor = SpeculativeExecutor(load_profile(PROFILE), speculation)
    results: dict[str, dict[str, float]] = {}
    for category in args.categories.split(","):
        log = load_spec_bench(args.method, category=None if category == "all" else category, turns="first")
        latency: dict[str, list[float]] = {order: [] for order in ORDERS}
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            turns = [log.turns[int(i)] for i in rng.choice(len(log.turns), args.requests, replace=False)]
            output = np.array([t.output_tokens for t in turns])
            yields = np.array([np.mean(t.accept_lengths) for t in turns])
            predicted = output * rng.uniform(0.8, 1.2, len(turns))
            workload = Workload.untiered("burst", np.zeros(len(turns)), [t.prompt_tokens for t in turns], output)
            workload = workload.with_accept_lengths([t.accept_lengths for t in turns])
            times = np.array([_time_s(executor, t.prompt_tokens, t.accept_lengths) for t in turns])
            keys = (predicted, predicted * yields.mean() / yields, times / times.min() * 1000)
            for order, key in zip(ORDERS, keys, strict=True):
                run = run_policy(workload.with_predicted_length(np.maximum(1, np.rint(key)).astype(np.int64)),
                                 "lp-sjf", cluster)
                mean = run.summary.overall.e2e_s.mean
                assert mean is not None
                latency[order].append(mean)
        results[category] = {order: float(np.median(values)) for order, values in latency.items()}
    print(f"| category ({args.method}, {args.requests} requests at once, median of {args.seeds} seeds) | "
          + " | ".join(f"{o} (s)" for o in ORDERS) + " | lp-sjf above the bound |")
    print("|---" * (len(ORDERS) + 2) + "|")
    for category, row in results.items():
        gap = row["lp-sjf"] / row["sjf on true time"] - 1
        print(f"| {category} | " + " | ".join(f"{row[o]:.2f}" for o in ORDERS) + f" | {gap:.1%} |")
    if args.json is not None:
        args.json.write_text(json.dumps({"method": args.method, "requests": args.requests, "seeds": args.seeds,
                                         "mean_latency_s": results}, indent=2))


if __name__ == "__main__":
    main()
