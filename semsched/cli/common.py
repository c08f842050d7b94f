"""What the commands share: the options of a simulation run, option checks, progress bars and output files.

Every check that can be made before a simulation starts is made before it starts (``--out``, ``--metric``,
policy specs, workload parameters and size), so that bad input never costs a run or leaves half a report.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from semsched.core.errors import SemschedError
from semsched.core.scheduler import SchedulerConfig
from semsched.core.tiers import TierError
from semsched.experiments.plots import policy_colours
from semsched.latency import ProfileError, load_profile
from semsched.metrics import Summary, print_comparison, write_json, write_requests_csv, write_summary_csv
from semsched.metrics import request_metrics as metrics_of
from semsched.metrics.plots import plot_class_bars, plot_series
from semsched.metrics.series import DEFAULT_BIN_S, write_series_csv
from semsched.policies import POLICIES, PolicyError
from semsched.policies.tier_table import load_tier_table
from semsched.predict.cost import PredictorCost, PredictorCostError, parse_predictor_cost
from semsched.sim.acceptance import fit_acceptance
from semsched.sim.disagg import MAX_POOL_INSTANCES
from semsched.sim.engine import ProgressCallback
from semsched.sim.parallel import PointRunner, default_workers, point_runner
from semsched.sim.prediction import (
    DEFAULT_LATENCY_S,
    LengthPredictionError,
    LengthPredictorSpec,
    is_length_spec,
    make_length_predictor,
    parse_length_spec,
    spec_reads_text,
)
from semsched.sim.runner import DEFAULT_PROFILE, ClusterSpec, PolicyRun, compare_policies
from semsched.sim.speculative import SpeculationError, SpeculationSpec, speculation_preset
from semsched.workloads import Workload, build_workload
from semsched.workloads.spec_bench import load_spec_bench


class UsageError(SemschedError):
    """A command-line option is invalid; the message names the option and the limit."""


#: upper limits of the engine's sizes (a BlockManager holds a list entry per block; beyond these, memory runs out)
MAX_KV_BLOCKS = 1 << 22
MAX_BLOCK_SIZE = 1024
#: engine instances behind one router, as for each pool of a PD cluster
MAX_INSTANCES = MAX_POOL_INSTANCES
#: rows per policy of series.csv (each row holds a few dozen columns)
MAX_SERIES_BINS = 100_000


def check_int(option: str, value: int, minimum: int, maximum: int | None = None) -> int:
    """``value`` of ``option`` within ``[minimum, maximum]``, or a :class:`UsageError` naming the option and
    the limit (a huge number is shown by its digit count)."""
    shown = str(value) if len(str(value)) <= 20 else f"an integer of {len(str(abs(value)))} digits"
    if value < minimum:
        raise UsageError(f"{option}: must be >= {minimum:,} (got {shown})")
    if maximum is not None and value > maximum:
        raise UsageError(f"{option}: must be at most {maximum:,} (got {shown})")
    return value


def check_seed(seed: int, option: str = "--seed") -> int:
    """A random seed: numpy's generators take only integers >= 0."""
    return check_int(option, seed, 0)


def out_path(text: str) -> Path:
    """The ``type`` of ``--out`` options: a path, never the empty one (``Path("")`` is the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path; give a directory (e.g. --out runs/mine)")
    return Path(text)


#: options that decide how a command runs, never what it computes: left out of the command a report records
_RUN_ONLY_OPTIONS = ("--workers", "--ray", "--progress")


def command_line() -> str:
    """The command as typed, for a report: without the options that only decide how it runs (``--workers N``,
    ``--ray [ADDRESS]``, ``--progress``), so that a report is the same byte for byte whatever ran it. (A bare word
    after ``--ray`` is its address, as argparse reads it.)"""
    words: list[str] = []
    value_follows = False
    for word in sys.argv[1:]:
        if value_follows:
            value_follows = False
            if not word.startswith("-"):
                continue
        name = word.split("=", 1)[0]
        if name in _RUN_ONLY_OPTIONS:
            value_follows = "=" not in word and name != "--progress"
            continue
        words.append(word)
    return " ".join(["semsched", *words])


# ---- options -----------------------------------------------------------------------------------------------
def add_run_args(parser: argparse.ArgumentParser) -> None:
    """The options of ``simulate`` and ``sweep``: policies, workload, cluster and output."""
    defaults = SchedulerConfig()
    parser.add_argument(
        "--policy",
        default="fcfs,priority,sjf",
        help="comma-separated policy specs; parameters as name:key=value;key=value (see `semsched policies`)",
    )
    parser.add_argument(
        "--workload",
        default="azure-conv",
        help="workload spec name:key=value;key=value (see `semsched workloads`) or a .csv/.jsonl trace path",
    )
    parser.add_argument(
        "--tiers",
        type=Path,
        default=None,
        help="YAML tier table the workload draws tiers and SLOs from (default: the built-in table; `semsched "
        "tiers --yaml` prints it); give it to tiered as tier_table= too for its shares and reserves",
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals (default 600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help="latency profile name or YAML/JSON path")
    parser.add_argument("--instances", type=int, default=1, help="engine instances behind the router")
    parser.add_argument(
        "--router",
        default="round-robin",
        help="round-robin | least-outstanding | min-load | go-routing | prefix-affinity, with parameters as "
        "name:key=value;key=value (e.g. go-routing:alpha=0.9;mu=0.1;lam=0.9)",
    )
    parser.add_argument("--gpu-blocks", type=int, default=defaults.num_gpu_blocks)
    parser.add_argument("--cpu-blocks", type=int, default=defaults.num_cpu_blocks, help="swap space in blocks")
    parser.add_argument("--block-size", type=int, default=defaults.block_size)
    parser.add_argument("--max-batched-tokens", type=int, default=defaults.max_num_batched_tokens)
    parser.add_argument("--max-seqs", type=int, default=defaults.max_num_seqs)
    parser.add_argument(
        "--prefix-caching", action="store_true",
        help="vLLM's automatic prefix caching on every instance: requests whose prefix hashes match (multi-turn "
        "workloads, Mooncake traces with hash_ids) reuse cached KV blocks and skip their prefill",
    )
    parser.add_argument(
        "--max-requests",
        type=int,
        default=None,
        help="refuse a workload with more requests than this (default: the workload builder's limit)",
    )
    parser.add_argument(
        "--predictor",
        action="append",
        default=None,
        metavar="SPEC",
        help="repeatable, at most one of each kind. The cost of predicting before scheduling (seed 000 Tables "
        "1-2): MODE:latency_s=S;batch_size=N, MODE immediate (batch whatever is queued) or full (wait for "
        "batch_size requests; optional max_wait_s=S), optional workers=N; a request enters the scheduler when its "
        "batch ends, latency still counts from arrival. An online output-length predictor (seed 002): "
        "length=NAME;key=value;... (e.g. length=semantic-knn;warmup=PATH), predicting each request when it is "
        "handed over, from the requests finished by then, optional latency_s=S per request (default "
        f"{DEFAULT_LATENCY_S:g}; with a cost spec its batches decide instead); the workload must carry prompts "
        "(alpaca-eval, mt-bench, mixed, ktas-ed). Default: neither",
    )
    parser.add_argument(
        "--speculation",
        default=None,
        metavar="METHOD",
        help="speculative decoding on every instance (seed 004): eagle or sps-68m (costs fitted to the Spec-Bench "
        "logs' wall times). Requests with a logged run (spec-bench workloads) replay it; the others draw rounds "
        "from the acceptance model fitted to that method's whole log; METHOD:fitted draws every request's rounds "
        "from it. Default: off",
    )
    parser.add_argument("--per-iteration", action="store_true", help="disable fast-forward (same metrics)")
    parser.add_argument(
        "--allow-stalls", action="store_true",
        help="a policy that leaves an engine idle with work it could run (a defect) ends those requests "
        "'stalled', counted in red, instead of stopping the run with an error",
    )
    parser.add_argument("--out", type=out_path, default=None, help="write JSON/CSV/PNG here")


def policy_specs(text: str, option: str = "--policy") -> list[str]:
    """Comma-separated policy specs, each validated (and built once) before anything runs."""
    specs = [s.strip() for s in text.split(",") if s.strip()]
    if not specs:
        raise PolicyError(f"{option}: give at least one policy")
    seen: set[str] = set()
    for spec in specs:
        if spec in seen:
            raise PolicyError(f"{option}: {spec!r} is given twice")
        seen.add(spec)
        POLICIES.create(spec)
    return specs


def check_swap_space(specs: Sequence[str], cpu_blocks: int) -> None:
    """Refuse a policy that swaps preempted requests' KV out (a config field set to ``swap``, given or by
    default) when ``--cpu-blocks`` leaves no room to swap to: the engine would quietly recompute instead."""
    if cpu_blocks > 0:
        return
    for spec in specs:
        config = POLICIES.create(spec).config
        for field in dataclasses.fields(config):
            if getattr(config, field.name) == "swap":
                given = f"{field.name}=swap" in spec.replace(" ", "")
                raise UsageError(
                    f"--cpu-blocks: policy {spec!r} swaps preempted requests to CPU memory ({field.name}=swap"
                    f"{'' if given else ', its default'}) but --cpu-blocks is 0, so every preemption would "
                    f"recompute instead; give --cpu-blocks N (e.g. 4096) or {field.name}=recompute"
                )


def float_list(text: str, option: str, *, positive: bool = True) -> list[float]:
    """``"2,3,4"`` as floats; an empty list, a non-number, a non-finite or (with ``positive``) a value <= 0
    names ``option`` and the bad item."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise UsageError(f"{option}: give at least one number (e.g. {option} 2,3,4)")
    values = []
    for item in items:
        if not item:
            raise UsageError(f"{option}: empty item in {text!r}")
        try:
            value = float(item)
        except ValueError:
            raise UsageError(f"{option}: {item!r} is not a number") from None
        if not math.isfinite(value) or (positive and value <= 0):
            raise UsageError(f"{option}: {item!r} must be a finite number{' > 0' if positive else ''}")
        values.append(value)
    if len(set(values)) != len(values):
        raise UsageError(f"{option}: a value is given twice in {text!r}")
    return values


def cluster_spec(args: argparse.Namespace) -> ClusterSpec:
    check_seed(args.seed)
    scheduler = SchedulerConfig(
        max_num_batched_tokens=check_int("--max-batched-tokens", args.max_batched_tokens, 1),
        max_num_seqs=check_int("--max-seqs", args.max_seqs, 1),
        block_size=check_int("--block-size", args.block_size, 1, MAX_BLOCK_SIZE),
        num_gpu_blocks=check_int("--gpu-blocks", args.gpu_blocks, 1, MAX_KV_BLOCKS),
        num_cpu_blocks=check_int("--cpu-blocks", args.cpu_blocks, 0, MAX_KV_BLOCKS),
        enable_prefix_caching=bool(getattr(args, "prefix_caching", False)),
    )
    check_int("--instances", args.instances, 1, MAX_INSTANCES)
    try:
        load_profile(args.profile)
    except ProfileError as error:
        raise UsageError(f"--profile: {error}") from None
    cost, length = predictor_specs(args.predictor or [])
    speculation = speculation_spec(args.speculation, args.seed) if getattr(args, "speculation", None) else None
    try:
        return ClusterSpec(args.profile, args.instances, args.router, scheduler, cost, length,
                           speculation=speculation, allow_stalls=getattr(args, "allow_stalls", False))
    except LengthPredictionError as error:
        raise UsageError(f"--predictor: {error}") from None


def speculation_spec(text: str, seed: int) -> SpeculationSpec:
    """``--speculation METHOD[:fitted]``: the preset, with the acceptance model fitted to that method's whole log
    for the requests that carry none (``:fitted``: for every request)."""
    method, _, mode = text.partition(":")
    if mode not in ("", "fitted"):
        raise UsageError(f"--speculation: {text!r}: after the method only ':fitted' may follow")
    try:
        preset = speculation_preset(method, seed=seed)
        log = load_spec_bench(method)
    except SpeculationError as error:
        raise UsageError(f"--speculation: {error}") from None
    fallback = fit_acceptance(log.accept_sequences(), preset.draft_tokens)
    return dataclasses.replace(preset, fallback=fallback, replay=mode != "fitted")


def predictor_specs(texts: Sequence[str]) -> tuple[PredictorCost | None, LengthPredictorSpec | None]:
    """The ``--predictor`` options: at most one cost spec (``immediate:``/``full:``) and one length predictor
    (``length=NAME;...``), each checked now (the length predictor is built once, its warm-up files read)."""
    cost: PredictorCost | None = None
    length: LengthPredictorSpec | None = None
    for text in texts:
        try:
            if is_length_spec(text):
                if length is not None:
                    raise UsageError(f"--predictor: two length predictors ({length.spec} and {text}); give one")
                length = parse_length_spec(text)
                make_length_predictor(length)
            else:
                if cost is not None:
                    raise UsageError(f"--predictor: two predictor costs ({cost.spec} and {text}); give one")
                cost = parse_predictor_cost(text)
        except (PredictorCostError, LengthPredictionError) as error:
            raise UsageError(f"--predictor: {error}") from None
    return cost, length


def check_prompts_for_prediction(cluster: ClusterSpec, workload: Workload) -> None:
    """A length predictor reads prompts: refuse, before any run, a workload that carries none."""
    length = cluster.length_predictor
    if length is not None and workload.prompt_text is None and spec_reads_text(length):
        raise UsageError(
            f"--predictor: {length.spec}: workload {workload.name!r} carries no prompt texts; this predictor "
            "needs them (alpaca-eval, mt-bench, mixed, ktas-ed); length=input-length and length=histogram "
            "do not"
        )


def workload_for(args: argparse.Namespace, rate: float) -> Workload:
    if not (math.isfinite(rate) and rate > 0):
        raise UsageError(f"--rate: must be a finite number > 0 (got {rate:g})")
    if not (math.isfinite(args.duration) and args.duration > 0):
        raise UsageError(f"--duration: must be a finite number > 0 (got {args.duration:g})")
    extra: dict[str, Any] = {}
    if args.max_requests is not None:
        if args.max_requests < 1:
            raise UsageError(f"--max-requests: must be >= 1 (got {args.max_requests})")
        extra["max_requests"] = args.max_requests
    if args.tiers is not None:
        try:
            extra["tiers"] = load_tier_table(args.tiers)
        except TierError as error:
            raise UsageError(f"--tiers: {error}") from None
    workload = build_workload(args.workload, rate_per_s=rate, duration_s=args.duration, seed=args.seed, **extra)
    if len(workload) == 0:
        raise UsageError(
            f"--rate/--duration: workload {args.workload!r} drew no requests at --rate {rate:g} over --duration "
            f"{args.duration:g} s; raise --rate or --duration"
        )
    return workload


def prepared_out_dir(out: Path, option: str = "--out") -> Path:
    """Create ``out`` (and its parents) now, before any run, or say why it cannot be."""
    for parent in (out, *out.parents):
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{option}: {parent} exists and is not a directory")
            break
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"{option}: cannot create {out}: {error.strerror}") from None
    if not os.access(out, os.W_OK):
        raise UsageError(f"{option}: cannot write to {out}")
    return out


def add_parallel_args(parser: argparse.ArgumentParser) -> None:
    """``--workers``, ``--ray`` and ``--progress``: how a command's independent simulations run (never what they
    compute: the output is the same byte for byte)."""
    parser.add_argument(
        "--workers", type=int, default=None, metavar="N",
        help=f"simulations at once, in a pool of N processes (default: all cores, {default_workers()} here; "
        "1: one after another in this process)",
    )
    parser.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="run the simulations as Ray tasks on the Ray cluster at ADDRESS (e.g. ray://head:10001 or auto), or "
        "on a local Ray of --workers CPUs when no ADDRESS is given (pip install 'semsched[ray]')",
    )
    parser.add_argument("--progress", action="store_true",
                        help="draw the progress bar on stderr even when it is not a terminal")


@contextmanager
def parallel_runner(args: argparse.Namespace) -> Iterator[PointRunner]:
    """The runner of ``--workers``/``--ray`` (checked here), shut down when the command ends. Make it before any
    progress bar: a pool forks its workers when it is made, and no thread of ours should be running then."""
    workers = default_workers() if args.workers is None else check_int("--workers", args.workers, 1)
    with point_runner(workers, ray=args.ray is not None, ray_address=args.ray or None) as runner:
        yield runner


class PointsBar:
    """One rich progress bar over a command's simulations (the :class:`semsched.sim.parallel.PointProgress`
    protocol): its total grows with each batch; its text names the last one finished."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task = progress.add_task("simulations", total=0)

    def planned(self, count: int) -> None:
        total = self._progress.tasks[0].total or 0
        self._progress.update(self._task, total=total + count)

    def finished(self, label: str) -> None:
        self._progress.update(self._task, advance=1, description=label if len(label) <= 48 else label[:45] + "...")


@contextmanager
def points_bar(show: bool = False) -> Iterator[PointsBar]:
    """A :class:`PointsBar` drawn on stderr when it is a terminal, or when ``show`` (``--progress``)."""
    console = Console(stderr=True, force_terminal=True if show else None)
    progress = Progress(
        TextColumn("{task.description:>48}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} simulations"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not (show or console.is_terminal),
    )
    with progress:
        yield PointsBar(progress)


# ---- running and showing -------------------------------------------------------------------------------------
def run_all(
    console: Console, workload: Workload, policies: Sequence[str], cluster: ClusterSpec, *, fast_forward: bool
) -> dict[str, PolicyRun]:
    """Every policy on the same workload, with a progress bar per policy."""
    runs: dict[str, PolicyRun] = {}
    with progress_bars(console) as bars:
        for policy in policies:
            advance = bars.start(policy, len(workload))
            runs |= compare_policies(workload, [policy], cluster, fast_forward=fast_forward, progress=advance)
    return runs


class ProgressBars:
    """rich progress bars, one per simulation (the :class:`semsched.experiments.RunProgress` protocol)."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    def start(self, label: str, total: int) -> ProgressCallback:
        task = self._progress.add_task(label, total=total)

        def advance(done: int, total: int) -> None:
            self._progress.update(task, completed=done, total=total)

        return advance


@contextmanager
def progress_bars(console: Console) -> Iterator[ProgressBars]:
    progress = Progress(
        TextColumn("{task.description:>28}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        yield ProgressBars(progress)


def show(console: Console, runs: dict[str, PolicyRun], title: str) -> None:
    console.print(f"[dim]{title}[/]")
    print_comparison(console, {p: r.summary for p, r in runs.items()})
    for policy, run in runs.items():
        if run.summary.overall.num_stalled:
            console.print(f"[bold red]stalled:[/] {policy} left {run.summary.overall.num_stalled} request(s) "
                          "stranded on an idle engine (a scheduler defect; requests.csv has them as 'stalled')",
                          highlight=False)


def write_outputs(
    console: Console,
    out: Path,
    runs: dict[str, PolicyRun],
    meta: dict[str, Any],
    *,
    series_bin_s: float = DEFAULT_BIN_S,
) -> None:
    """summary.json/.csv, requests.csv and comparison.png; series.csv and series.png (monitoring series per
    ``series_bin_s`` of simulated time); each policy in its :func:`policy_colours` colour in both plots."""
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Summary] = {p: r.summary for p, r in runs.items()}
    meta = meta | {"wall_s": {p: round(r.wall_s, 3) for p, r in runs.items()}}
    write_json(out / "summary.json", results, meta)
    write_summary_csv(out / "summary.csv", results)
    for index, (policy, run) in enumerate(runs.items()):
        write_requests_csv(out / "requests.csv", [metrics_of(r) for r in run.requests], policy, append=index > 0)
    colours = policy_colours(list(runs))
    plot_class_bars(results, out / "comparison.png", colours=colours)
    series = {p: r.series(series_bin_s) for p, r in runs.items()}
    write_series_csv(out / "series.csv", series)
    plot_series(series, out / "series.png", colours)
    console.print(
        f"report: {out / 'summary.json'} (and summary.csv, requests.csv, series.csv)\n"
        f"plots:  {out / 'comparison.png'}, {out / 'series.png'}"
    )


def run_meta(
    args: argparse.Namespace, workload: Workload | None, cluster: ClusterSpec, rate: float | None
) -> dict[str, Any]:
    return {
        "command": command_line(),
        "workload": args.workload,
        "num_requests": len(workload) if workload is not None else None,
        "rate_per_s": rate,
        "duration_s": args.duration,
        "seed": args.seed,
        "profile": cluster.profile,
        "instances": cluster.num_instances,
        "router": cluster.router,
        "pd": None if cluster.pd is None else dataclasses.asdict(cluster.pd),
        "scheduler": vars(cluster.scheduler) if hasattr(cluster.scheduler, "__dict__") else str(cluster.scheduler),
        "fast_forward": not args.per_iteration,
        "predictor": cluster.predictor.spec if cluster.predictor is not None else None,
        "length_predictor": cluster.length_predictor.spec if cluster.length_predictor is not None else None,
    }
