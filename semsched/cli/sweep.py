"""``semsched sweep``: compare policies over several request rates and plot one metric against the rate."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from semsched.cli.common import (
    UsageError,
    add_parallel_args,
    add_run_args,
    check_prompts_for_prediction,
    check_swap_space,
    cluster_spec,
    float_list,
    parallel_runner,
    points_bar,
    policy_specs,
    prepared_out_dir,
    run_meta,
    workload_for,
)
from semsched.cli.predictions import warn_about_missing_predictions
from semsched.metrics import Summary, metric_names
from semsched.metrics.plots import plot_latency_vs_rate
from semsched.metrics.report import sweep_table
from semsched.sim.parallel import SimPoint
from semsched.sim.runner import PolicyRun
from semsched.workloads import parse_workload_spec


def register(sub: Any) -> None:
    parser = sub.add_parser("sweep", help="compare policies over several request rates and plot them")
    add_run_args(parser)
    parser.add_argument("--rates", default="2,3,4,5,6", help="comma-separated request rates (default 2,3,4,5,6)")
    parser.add_argument("--metric", default="e2e_mean", help="metric to plot (e.g. e2e_mean, ttft_p90, tdg_ratio)")
    add_parallel_args(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    policies, cluster = policy_specs(args.policy), cluster_spec(args)
    check_swap_space(policies, args.cpu_blocks)
    rates = float_list(args.rates, "--rates")
    if args.metric not in metric_names():
        raise UsageError(f"--metric: unknown metric {args.metric!r}; known: {', '.join(metric_names())}")
    _, workload_config = parse_workload_spec(args.workload)
    if not workload_config.uses_rate:
        console.print(f"[yellow]note:[/] workload {args.workload!r} keeps its own timing: "
                      "--rates does not change its arrivals", highlight=False)
    workloads = [workload_for(args, rate) for rate in rates]  # every size checked before --out is made
    check_prompts_for_prediction(cluster, workloads[0])
    out = prepared_out_dir(args.out or Path("runs/sweep"))
    if cluster.length_predictor is None:  # (with one, every request carries a prediction)
        warn_about_missing_predictions(console, policies, workloads[0])
    for rate, workload in zip(rates, workloads, strict=True):
        console.print(f"rate {rate:g}/s: {len(workload)} requests")
    # every (rate, policy) pair is one independent simulation; the runs come back in this order
    points = [SimPoint(f"rate {rate:g}/s {policy}", workload, policy, cluster, fast_forward=not args.per_iteration)
              for rate, workload in zip(rates, workloads, strict=True) for policy in policies]
    with parallel_runner(args) as runner, points_bar(args.progress) as bar:
        runs = runner.run(points, bar)
    sweep: dict[str, list[tuple[float, Summary]]] = {p: [] for p in policies}
    for rate_runs, rate in zip(_per_rate(runs, len(policies)), rates, strict=True):
        for policy, policy_run in zip(policies, rate_runs, strict=True):
            sweep[policy].append((rate, policy_run.summary))
    console.print(sweep_table(sweep, args.metric))
    plot_latency_vs_rate(sweep, out / f"sweep_{args.metric}.png", metric=args.metric)
    meta = run_meta(args, None, cluster, rate=None) | {"rates": rates}
    results = {p: [{"rate": r, **s.to_dict()} for r, s in points] for p, points in sweep.items()}
    (out / "sweep.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2, default=str))
    console.print(f"plot: {out / f'sweep_{args.metric}.png'}\nreport: {out / 'sweep.json'}")
    return 0


def _per_rate(runs: list[PolicyRun], num_policies: int) -> list[list[PolicyRun]]:
    return [runs[start:start + num_policies] for start in range(0, len(runs), num_policies)]
