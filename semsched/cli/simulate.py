"""``semsched simulate``: compare policies on one workload at one request rate."""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

from rich.console import Console

from semsched.cli.common import (
    MAX_SERIES_BINS,
    UsageError,
    add_run_args,
    check_prompts_for_prediction,
    check_swap_space,
    cluster_spec,
    policy_specs,
    prepared_out_dir,
    run_all,
    run_meta,
    show,
    workload_for,
)
from semsched.cli.predictions import warn_about_missing_predictions
from semsched.sim.disagg import DEFAULT_KV_LINK_GBPS, DEFAULT_MODEL_SHAPE, DisaggregationError, PDSpec
from semsched.sim.runner import ClusterSpec
from semsched.workloads import Workload, WorkloadError, parse_workload_spec


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
    add_pd_args(parser)
    parser.set_defaults(handler=run)


def add_pd_args(parser: argparse.ArgumentParser) -> None:
    """PD disaggregation (seed 001 §4.3): prefill and decode pools instead of ``--instances``."""
    group = parser.add_argument_group("PD disaggregation (instead of --instances)")
    group.add_argument("--prefill-instances", type=int, default=None, metavar="N",
                       help="prefill instances; --router picks one per request (give --decode-instances too)")
    group.add_argument("--decode-instances", type=int, default=None, metavar="M",
                       help="decode instances; a request's KV moves to the one with the most free blocks when its "
                       "prefill ends (or the router's choice: go-routing, min-load)")
    group.add_argument("--kv-link-gbps", type=float, default=None, metavar="X",
                       help=f"KV link from prefill to decode, GB/s (gigabytes per second; default "
                       f"{DEFAULT_KV_LINK_GBPS:g}, one 200 Gb/s RDMA NIC)")
    group.add_argument("--kv-model", default=None, metavar="NAME",
                       help=f"model whose KV crosses the link (bytes per token; default {DEFAULT_MODEL_SHAPE})")


#: the command-line option of each PDSpec field (its errors name the field)
_PD_OPTIONS = {
    "pd.num_prefill_instances": "--prefill-instances",
    "pd.num_decode_instances": "--decode-instances",
    "pd.kv_link_gbps": "--kv-link-gbps",
    "pd.model_shape": "--kv-model",
}


def with_pd(args: argparse.Namespace, cluster: ClusterSpec) -> ClusterSpec:
    """``cluster`` made PD-disaggregated by the PD options, or as it is when none is given."""
    prefill, decode = args.prefill_instances, args.decode_instances
    if prefill is None and decode is None:
        for option, value in (("--kv-link-gbps", args.kv_link_gbps), ("--kv-model", args.kv_model)):
            if value is not None:
                raise UsageError(f"{option}: only with --prefill-instances and --decode-instances")
        return cluster
    if prefill is None or decode is None:
        raise UsageError("--prefill-instances and --decode-instances: give both (or neither)")
    if args.instances != 1:
        raise UsageError(
            f"--instances: leave it out with --prefill-instances/--decode-instances (got {args.instances})"
        )
    try:
        pd = PDSpec(
            prefill, decode,
            DEFAULT_KV_LINK_GBPS if args.kv_link_gbps is None else args.kv_link_gbps,
            DEFAULT_MODEL_SHAPE if args.kv_model is None else args.kv_model,
        )
    except DisaggregationError as error:
        field, _, rest = str(error).partition(":")
        raise UsageError(f"{_PD_OPTIONS.get(field, field)}:{rest}") from None
    return dataclasses.replace(cluster, pd=pd)


def check_series_bins(bin_s: float, span_s: float) -> None:
    """``--series-bin`` gives at most :data:`MAX_SERIES_BINS` rows over the arrivals' span (a run that drains
    long after it adds rows, a few times as many at most)."""
    if span_s / bin_s > MAX_SERIES_BINS:
        raise UsageError(
            f"--series-bin: {bin_s:g} s gives {span_s / bin_s:.3g} rows of series.csv over {span_s:g} s of "
            f"arrivals, more than the limit of {MAX_SERIES_BINS:,}; give at least {span_s / MAX_SERIES_BINS:.3g} s"
        )


def true_rate(spec: str, workload: Workload, rate_per_s: float) -> tuple[float | None, str]:
    """The rate the workload's arrivals have and how the header says it: ``--rate`` for a workload it shapes;
    for one that keeps its own timing (spikes with ``gap_s``, a trace with ``rescale=false``) its mean rate,
    said to be its own (``None`` when every request arrives at one instant)."""
    if parse_workload_spec(spec)[1].uses_rate:
        return rate_per_s, f"at {rate_per_s:g}/s"
    try:
        mean = workload.mean_rate()
    except WorkloadError:
        return None, "all at once (the workload's own timing; --rate not used)"
    return mean, f"at {mean:.3g}/s on average (the workload's own timing; --rate not used)"


def run(args: argparse.Namespace, console: Console) -> int:
    policies, cluster = policy_specs(args.policy), with_pd(args, cluster_spec(args))
    if not (math.isfinite(args.series_bin) and args.series_bin > 0):
        raise UsageError(f"--series-bin: must be a finite number > 0 (got {args.series_bin:g})")
    check_swap_space(policies, args.cpu_blocks)
    workload = workload_for(args, args.rate)  # its size is checked first: a refused run leaves no --out behind
    check_series_bins(args.series_bin, max(args.duration, float(workload.arrival_time_s[-1])))
    check_prompts_for_prediction(cluster, workload)
    if args.out is not None:
        prepared_out_dir(args.out)
    if cluster.length_predictor is None:  # (with one, every request carries a prediction)
        warn_about_missing_predictions(console, policies, workload)
    rate_per_s, rate_text = true_rate(args.workload, workload, args.rate)
    if rate_per_s != args.rate:
        console.print(f"[yellow]note:[/] workload {args.workload!r} keeps its own timing: --rate {args.rate:g} "
                      "does not change its arrivals", highlight=False)
    runs = run_all(console, workload, policies, cluster, fast_forward=not args.per_iteration)
    show(console, runs, f"{workload.name}: {len(workload)} requests {rate_text}, profile {args.profile}")
    if args.out is not None:
        from semsched.cli.common import write_outputs

        meta = run_meta(args, workload, cluster, rate=rate_per_s)
        write_outputs(console, args.out, runs, meta, series_bin_s=args.series_bin)
    return 0
