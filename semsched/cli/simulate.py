"""``semsched simulate``: compare policies on one workload at one request rate."""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich.console import Console

from semsched.cli.common import (
    UsageError,
    add_run_args,
    check_prompts_for_prediction,
    cluster_spec,
    policy_specs,
    prepared_out_dir,
    run_all,
    run_meta,
    show,
    workload_for,
)
from semsched.cli.predictions import warn_about_missing_predictions


def register(sub: Any) -> None:
    parser = sub.add_parser("simulate", help="compare policies on one workload at one request rate")
    add_run_args(parser)
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second (default 4)")
    parser.add_argument(
        "--series-bin",
        type=float,
        default=60.0,
        help="seconds of simulated time per row of series.csv (monitoring series; default 60)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    policies, cluster = policy_specs(args.policy), cluster_spec(args)
    if not (math.isfinite(args.series_bin) and args.series_bin > 0):
        raise UsageError(f"--series-bin: must be a finite number > 0 (got {args.series_bin:g})")
    workload = workload_for(args, args.rate)  # its size is checked first: a refused run leaves no --out behind
    check_prompts_for_prediction(cluster, workload)
    if args.out is not None:
        prepared_out_dir(args.out)
    if cluster.length_predictor is None:  # (with one, every request carries a prediction)
        warn_about_missing_predictions(console, policies, workload)
    runs = run_all(console, workload, policies, cluster, fast_forward=not args.per_iteration)
    show(console, runs, f"{workload.name}: {len(workload)} requests at {args.rate:g}/s, profile {args.profile}")
    if args.out is not None:
        from semsched.cli.common import write_outputs

        meta = run_meta(args, workload, cluster, rate=args.rate)
        write_outputs(console, args.out, runs, meta, series_bin_s=args.series_bin)
    return 0
