"""``semsched advise --workload TRACE``: replay the scoreboard's contenders on a user's own traffic over a load
range and say which policy to run, with its expected gain per tier against vLLM's FCFS and the exact settings
(:mod:`semsched.experiments.advise`)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from semsched.cli.common import (
    UsageError,
    add_parallel_args,
    check_int,
    cluster_spec,
    float_list,
    out_path,
    parallel_runner,
    points_bar,
    policy_specs,
    prepared_out_dir,
)
from semsched.core.scheduler import SchedulerConfig
from semsched.core.tiers import TierError
from semsched.experiments.advise import (
    DEFAULT_LOADS,
    DEFAULT_REQUESTS,
    DEFAULT_SEEDS,
    MIN_REQUESTS,
    Advice,
    AdviseSettings,
    advise,
    gateway_settings,
    semsched_policy_line,
)
from semsched.policies.tier_table import load_tier_table
from semsched.sim.runner import DEFAULT_PROFILE

#: the length predictor advise puts in front of the engines unless told otherwise: it reads prompt lengths only, so
#: it runs on any trace, and the gateway has it (``classifier.length: input-length``)
DEFAULT_PREDICTOR = "length=input-length"
#: the most seeds and loads one advice runs (each multiplies every contender's runs)
MAX_SEEDS = 20
MAX_LOADS = 12


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "advise",
        help="which policy to run on your own traffic: every contender replayed on it over a load range",
    )
    parser.add_argument("--workload", default="azure-conv",
                        help="your trace (an Azure-format .csv or Mooncake-format .jsonl path) or any workload "
                             "spec (`semsched workloads`; default azure-conv, the embedded default)")
    parser.add_argument("--tiers", type=Path, default=None,
                        help="YAML tier table your requests' tiers and SLOs come from (default: the built-in one)")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help="latency profile of your engine (`semsched "
                        "profiles`; `semsched profile` measures your own)")
    parser.add_argument("--instances", type=int, default=1, help="engines behind the router (default 1)")
    parser.add_argument("--router", default="round-robin", help="router spec, as the gateway's routing.router")
    defaults = SchedulerConfig()
    parser.add_argument("--gpu-blocks", type=int, default=defaults.num_gpu_blocks)
    parser.add_argument("--cpu-blocks", type=int, default=defaults.num_cpu_blocks, help="swap space in blocks")
    parser.add_argument("--block-size", type=int, default=defaults.block_size)
    parser.add_argument("--max-batched-tokens", type=int, default=defaults.max_num_batched_tokens)
    parser.add_argument("--max-seqs", type=int, default=defaults.max_num_seqs)
    parser.add_argument("--predictor", action="append", default=None, metavar="SPEC",
                        help="the online output-length predictor in front of the engines, length=NAME;... (as "
                             f"`semsched simulate --predictor`; semantic-knn needs prompt texts). Default: "
                             f"{DEFAULT_PREDICTOR}, which reads prompt lengths only, as the gateway's "
                             "classifier.length can")
    parser.add_argument("--no-predictor", action="store_true",
                        help="no length predictor: policies that order by predicted lengths are then not advised")
    parser.add_argument("--loads", default=",".join(f"{x:g}" for x in DEFAULT_LOADS),
                        help="fractions of the measured capacity (default %(default)s)")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS,
                        help=f"windows of the trace (or draws of a synthetic workload), one per seed (default "
                             f"{DEFAULT_SEEDS})")
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS,
                        help=f"requests per run: each seed's window (default {DEFAULT_REQUESTS})")
    parser.add_argument("--contenders", default=None, metavar="SPECS",
                        help="comma-separated policy specs to compare instead of the scoreboard's contenders "
                             "(vllm-fcfs, the baseline, is always added)")
    parser.add_argument("--out", type=out_path, default=None, help="write advice.json here (default runs/advise)")
    add_parallel_args(parser)
    parser.set_defaults(handler=run, seed=0, speculation=None, allow_stalls=True)


def settings_of(args: argparse.Namespace) -> AdviseSettings:
    """Every option checked, before anything runs."""
    if args.no_predictor and args.predictor:
        raise UsageError("--no-predictor: leave --predictor out with it")
    if args.predictor is None and not args.no_predictor:
        args.predictor = [DEFAULT_PREDICTOR]
    loads = float_list(args.loads, "--loads")
    if len(loads) > MAX_LOADS:
        raise UsageError(f"--loads: at most {MAX_LOADS} loads (got {len(loads)})")
    check_int("--seeds", args.seeds, 1, MAX_SEEDS)
    check_int("--requests", args.requests, MIN_REQUESTS)
    contenders = None
    if args.contenders is not None:
        contenders = {spec: spec for spec in policy_specs(args.contenders, "--contenders")}
    tiers: dict[str, Any] = {}
    if args.tiers is not None:
        try:
            tiers = {"tiers": load_tier_table(args.tiers), "tier_table_path": str(args.tiers)}
        except (TierError, OSError) as error:
            raise UsageError(f"--tiers: {error}") from None
    return AdviseSettings(workload=args.workload, cluster=cluster_spec(args), loads=loads, seeds=args.seeds,
                          requests=args.requests, contenders=contenders, **tiers)


def run(args: argparse.Namespace, console: Console) -> int:
    settings = settings_of(args)
    out = prepared_out_dir(args.out or Path("runs/advise"))

    def capacity_found(per_s: float, window: int) -> None:
        console.print(f"capacity: {per_s:.3g} requests/s on {settings.cluster.num_instances} x "
                      f"{settings.cluster.profile} ({window} requests a window, {settings.seeds} windows); loads "
                      f"{', '.join(f'{x:g}x' for x in settings.loads)}", highlight=False)

    with parallel_runner(args) as runner, points_bar(args.progress) as bar:
        advice = advise(settings, runner, bar, on_capacity=capacity_found)
    show(console, advice)
    (out / "advice.json").write_text(json.dumps(advice.to_dict(), indent=2, default=str))
    console.print(f"report: {out / 'advice.json'}")
    return 0


def show(console: Console, advice: Advice) -> None:
    loads = advice.settings.loads
    table = Table(title=f"tier-weighted goodput (requests/s meeting every SLO, weighted 8/4/2/1) on "
                        f"{advice.workload_name}: median over {advice.settings.seeds} windows")
    table.add_column("contender")
    for load in loads:
        table.add_column(f"{load:g}x", justify="right")
    table.add_column("worst regret", justify="right")
    table.add_column("note")
    ranked = sorted(advice.results, key=lambda r: (bool(r.ineligible), _sort_key(advice.worst_regret[r.label])))
    for r in ranked:
        regret = advice.worst_regret[r.label]
        label = f"[bold green]{r.label}[/]" if r.label == advice.best_label else r.label
        table.add_row(label, *(f"{r.median_goodput(x):.3g}" for x in loads),
                      "-" if regret is None else f"{regret:.3f}", r.ineligible)
    console.print(table)
    best = advice.best
    regret = advice.worst_regret[best.label]
    console.print(f"\n[bold]Run {escape(best.spec)}[/] (worst regret {regret:.3f} over the loads: the best "
                  "contender's goodput / its own, at its worst load)", highlight=False)
    console.print("expected gain against vllm-fcfs, median \\[min-max] over the windows:", highlight=False)
    for load, band in advice.goodput_gain.items():
        if band is not None:
            console.print(f"  goodput at {load:g}x capacity: {_band(band)}", highlight=False)
    runs = len(best.outcomes)
    for gain in advice.gains:
        if gain.median is not None and gain.low is not None and gain.high is not None:
            console.print(f"  {gain.tier} SLO attainment over all {runs} runs: {_pct(gain.ours)} vs "
                          f"{_pct(gain.baseline)} (medians), {_band((gain.median, gain.low, gain.high))}",
                          highlight=False)
    console.print("\nvLLM (each engine):", highlight=False)
    console.print(f"  {semsched_policy_line(best.spec)} vllm serve MODEL --scheduler-cls semsched.vllm.Scheduler "
                  "--middleware semsched.vllm.XargsValidationMiddleware", highlight=False, soft_wrap=True)
    console.print("gateway (gateway.yaml, docs/gateway.md):", highlight=False)
    for line in gateway_settings(advice).splitlines():
        console.print(f"  {line}", highlight=False)
    for note in advice.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)


def _band(band: tuple[float, float, float]) -> str:
    return f"{band[0]:.2f}x \\[{band[1]:.2f}-{band[2]:.2f}]"


def _sort_key(regret: float | None) -> float:
    return math.inf if regret is None else regret


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"
