"""Command line: ``semsched simulate | sweep | demo | profile | fidelity | policies | profiles | workloads``.

Bad input (unknown policy, malformed trace row, negative rate, ...) prints one ``error:`` line naming the
field and exits with status 2; it never shows a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from semsched.core.request import InvalidRequestError
from semsched.core.scheduler import SchedulerConfig
from semsched.latency import (
    ProfileError,
    load_profile_info,
    packaged_profiles,
    user_profile_dir,
    user_profile_path,
    user_profiles,
)
from semsched.metrics import (
    Summary,
    class_table,
    print_comparison,
    write_json,
    write_requests_csv,
    write_summary_csv,
)
from semsched.metrics import request_metrics as metrics_of
from semsched.metrics.plots import plot_class_bars, plot_latency_vs_rate
from semsched.policies import POLICIES, PolicyError
from semsched.sim.runner import DEFAULT_PROFILE, ClusterSpec, PolicyRun, compare_policies
from semsched.workloads import WORKLOADS, Workload, WorkloadError, build_workload, find_data_file

# above this spread between a step's repeats, the noise is as large as the effects the fit has to resolve
_NOISY_REPEAT_SPREAD = 0.25
USER_ERRORS = (PolicyError, WorkloadError, ProfileError, InvalidRequestError, ValueError, FileNotFoundError)
DEMO_POLICIES = "fcfs,priority,priority-preempt,sjf,srpt,edf"


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    # wide enough for the comparison table when output is piped to a file
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        handler: Callable[[argparse.Namespace, Console], int] = args.handler
        return handler(args, console)
    except USER_ERRORS as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        return 2


# ---- arguments -------------------------------------------------------------------------------------------
def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="semsched", description="Which LLM request runs next: simulate and compare scheduling policies."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    simulate = sub.add_parser("simulate", help="compare policies on one workload at one request rate")
    _add_run_args(simulate)
    simulate.add_argument("--rate", type=float, default=4.0, help="requests per second (default 4)")
    simulate.set_defaults(handler=_cmd_simulate)
    sweep = sub.add_parser("sweep", help="compare policies over several request rates and plot them")
    _add_run_args(sweep)
    sweep.add_argument("--rates", default="2,3,4,5,6", help="comma-separated request rates (default 2,3,4,5,6)")
    sweep.add_argument("--metric", default="e2e_mean", help="metric to plot (e.g. e2e_mean, ttft_p90, tdg_ratio)")
    sweep.set_defaults(handler=_cmd_sweep)
    demo = sub.add_parser("demo", help="a one-minute comparison of every policy on the embedded default workload")
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="output directory (default runs/demo)")
    demo.set_defaults(handler=_cmd_demo)
    _add_profile_parser(sub)
    _add_fidelity_parser(sub)
    for name, func, text in (
        ("policies", _cmd_policies, "list policies and their parameters"),
        ("profiles", _cmd_profiles, "list latency profiles"),
        ("workloads", _cmd_workloads, "list named workloads"),
    ):
        sub.add_parser(name, help=text).set_defaults(handler=func)
    return parser


def _add_run_args(parser: argparse.ArgumentParser) -> None:
    defaults = SchedulerConfig()
    parser.add_argument(
        "--policy",
        default="fcfs,priority,sjf",
        help="comma-separated policy specs; parameters as name:key=value;key=value (see `semsched policies`)",
    )
    parser.add_argument("--workload", default="azure-conv", help="named workload or a .csv/.jsonl trace path")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of arrivals (default 600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help="latency profile name or YAML/JSON path")
    parser.add_argument("--instances", type=int, default=1, help="engine instances behind the router")
    parser.add_argument("--router", default="round-robin", help="round-robin | least-outstanding")
    parser.add_argument("--gpu-blocks", type=int, default=defaults.num_gpu_blocks)
    parser.add_argument("--cpu-blocks", type=int, default=defaults.num_cpu_blocks, help="swap space in blocks")
    parser.add_argument("--block-size", type=int, default=defaults.block_size)
    parser.add_argument("--max-batched-tokens", type=int, default=defaults.max_num_batched_tokens)
    parser.add_argument("--max-seqs", type=int, default=defaults.max_num_seqs)
    parser.add_argument("--per-iteration", action="store_true", help="disable fast-forward (same metrics)")
    parser.add_argument("--out", type=Path, default=None, help="write JSON/CSV/PNG here")


def _policies(text: str) -> list[str]:
    # ',' separates specs, ';' the parameters inside one spec (name:key=value;key=value)
    specs = [s.strip() for s in text.split(",") if s.strip()]
    if not specs:
        raise PolicyError("--policy: give at least one policy")
    seen: set[str] = set()
    for spec in specs:
        if spec in seen:
            raise PolicyError(f"--policy: {spec!r} is given twice")
        seen.add(spec)
        POLICIES.create(spec)  # validate all before running any
    return specs


def _cluster(args: argparse.Namespace) -> ClusterSpec:
    scheduler = SchedulerConfig(
        max_num_batched_tokens=args.max_batched_tokens,
        max_num_seqs=args.max_seqs,
        block_size=args.block_size,
        num_gpu_blocks=args.gpu_blocks,
        num_cpu_blocks=args.cpu_blocks,
    )
    return ClusterSpec(args.profile, args.instances, args.router, scheduler)


def _workload(args: argparse.Namespace, rate: float) -> Workload:
    if rate <= 0:
        raise ValueError(f"--rate: must be > 0 (got {rate})")
    if args.duration <= 0:
        raise ValueError(f"--duration: must be > 0 (got {args.duration})")
    return build_workload(args.workload, rate_per_s=rate, duration_s=args.duration, seed=args.seed)


# ---- commands --------------------------------------------------------------------------------------------
def _cmd_simulate(args: argparse.Namespace, console: Console) -> int:
    policies, cluster = _policies(args.policy), _cluster(args)
    workload = _workload(args, args.rate)
    runs = _run_all(console, workload, policies, cluster, fast_forward=not args.per_iteration)
    _show(console, runs, f"{workload.name}: {len(workload)} requests at {args.rate:g}/s, profile {args.profile}")
    if args.out is not None:
        _write_outputs(console, args.out, runs, _meta(args, workload, cluster, rate=args.rate))
    return 0


def _cmd_sweep(args: argparse.Namespace, console: Console) -> int:
    policies, cluster = _policies(args.policy), _cluster(args)
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    sweep: dict[str, list[tuple[float, Summary]]] = {p: [] for p in policies}
    for rate in rates:
        workload = _workload(args, rate)
        console.print(f"rate {rate:g}/s: {len(workload)} requests")
        runs = _run_all(console, workload, policies, cluster, fast_forward=not args.per_iteration)
        for policy, run in runs.items():
            sweep[policy].append((rate, run.summary))
    out = args.out or Path("runs/sweep")
    out.mkdir(parents=True, exist_ok=True)
    plot_latency_vs_rate(sweep, out / f"sweep_{args.metric}.png", metric=args.metric)
    meta = _meta(args, None, cluster, rate=None) | {"rates": rates}
    (out / "sweep.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "results": {p: [{"rate": r, **s.to_dict()} for r, s in pts] for p, pts in sweep.items()},
            },
            indent=2,
            default=str,
        )
    )
    console.print(f"plot: {out / f'sweep_{args.metric}.png'}\nreport: {out / 'sweep.json'}")
    return 0


def _cmd_demo(args: argparse.Namespace, console: Console) -> int:
    """Every policy on the embedded default workload (fitted from the Azure conversation trace, four
    priority tiers with seed 003's SLOs) at ~90 % load on the A100/Qwen1.5-4B profile."""
    rate, duration = 4.0, 600.0
    workload = build_workload("azure-conv", rate_per_s=rate, duration_s=duration, seed=0)
    cluster = ClusterSpec()
    policies = _policies(DEMO_POLICIES)
    console.print(
        f"[bold]semsched demo[/]: {len(workload)} requests (embedded Azure-conversation fit, tiers "
        f"{', '.join(t.name for t in workload.tiers)}) at {rate:g}/s for {duration:g} s on {cluster.profile}"
    )
    runs = _run_all(console, workload, policies, cluster, fast_forward=True)
    _show(console, runs, "all requests")
    console.print(class_table({p: r.summary for p, r in runs.items()}, "ttft_p90"))
    meta = {
        "command": "semsched demo",
        "workload": workload.name,
        "rate_per_s": rate,
        "duration_s": duration,
        "profile": cluster.profile,
        "seed": 0,
    }
    _write_outputs(console, args.out, runs, meta)
    return 0


def _cmd_policies(args: argparse.Namespace, console: Console) -> int:
    import dataclasses

    for name in POLICIES.names():
        cls = POLICIES.get(name)
        params = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls.config_cls))
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
        console.print(f"[bold]{name}[/] {params}\n    {doc}", highlight=False)
    return 0


def _cmd_profiles(args: argparse.Namespace, console: Console) -> int:
    for name in packaged_profiles():
        console.print(name)
    for name, path in user_profiles().items():
        console.print(f"{name}  [dim](user: {path})[/]", highlight=False)
    console.print(f"[dim](user profiles are read from {user_profile_dir()})[/]", highlight=False)
    return 0


def _cmd_workloads(args: argparse.Namespace, console: Console) -> int:
    for name in sorted(WORKLOADS):
        console.print(name)
    console.print("(or a path to an Azure-format .csv or Mooncake-format .jsonl trace)")
    return 0


# ---- profile -----------------------------------------------------------------------------------------------
def _add_profile_parser(sub: Any) -> None:
    profile = sub.add_parser(
        "profile",
        help="measure a real engine's step latencies and fit a batch latency profile to them",
        description="Run a grid of batch compositions on an in-process engine, fit PROSERVE's batch model "
        "(eq. 4-7) to the measured step times and write a profile that `simulate --profile NAME` loads. On a CPU "
        "shared with other processes timings are noisy; --statistic min (the default) keeps each step's fastest "
        "repeat. vLLM's own settings (e.g. VLLM_CPU_OMP_THREADS_BIND) apply.",
    )
    profile.add_argument("--engine", default="vllm", help="engine to profile (only vllm for now)")
    profile.add_argument("--model", required=True, help="local model directory")
    profile.add_argument("--name", default=None, help="profile name (default: <model dir>-vllm-<device>)")
    profile.add_argument("--out", type=Path, default=None, help="write here (.yaml/.yml/.json), not the user dir")
    profile.add_argument("--force", action="store_true", help="replace an existing profile file")
    profile.add_argument("--grid", default="quick", help="quick (hundreds of steps, default) or full (thousands)")
    profile.add_argument("--repeats", type=int, default=None, help="rounds over the grid (quick 3, full 5)")
    profile.add_argument("--statistic", default="min", help="min (default), median or mean of each step's repeats")
    profile.add_argument("--timing", default="execute", help="execute (model step, default) or iteration")
    profile.add_argument("--max-model-len", type=int, default=2048)
    profile.add_argument("--max-seqs", type=int, default=16, help="vLLM max_num_seqs (default 16)")
    profile.add_argument("--max-batched-tokens", type=int, default=512, help="vLLM max_num_batched_tokens (512)")
    profile.add_argument("--block-size", type=int, default=32, help="KV block size, a multiple of 32 on CPU (32)")
    profile.add_argument(
        "--gpu-blocks", type=int, default=None, help="KV blocks (default: max-seqs full sequences)"
    )
    profile.add_argument("--dtype", default="bfloat16")
    profile.add_argument("--seed", type=int, default=0, help="seed of the engine and of the prompt token ids")
    profile.add_argument("--compile", action="store_true", help="let vLLM compile the model (default: eager)")
    profile.add_argument("--steps-csv", type=Path, default=None, help="also write every measured step here")
    profile.set_defaults(handler=_cmd_profile)


def _cmd_profile(args: argparse.Namespace, console: Console) -> int:
    """Measure, fit, write. Everything that can be checked is checked before the engine starts."""
    if args.engine != "vllm":
        raise ValueError(f"--engine: only 'vllm' can be profiled (got {args.engine!r})")
    if not Path(args.model).is_dir():
        raise ValueError(f"--model: {args.model} is not a directory")
    from semsched.calibrate import profiling  # plain Python; vLLM itself is imported when the engine starts

    settings = profiling.EngineSettings(
        model=args.model,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_seqs,
        max_num_batched_tokens=args.max_batched_tokens,
        block_size=args.block_size,
        num_gpu_blocks=args.gpu_blocks,
        dtype=args.dtype,
        seed=args.seed,
        enforce_eager=not args.compile,
    )
    grid = profiling.make_grid(args.grid, settings, repeats=args.repeats)
    grid.check(settings)
    for option, value, allowed in (
        ("--timing", args.timing, profiling.TIMINGS),
        ("--statistic", args.statistic, profiling.STATISTICS),
    ):
        if value not in allowed:
            raise ValueError(f"{option}: expected one of {', '.join(allowed)} (got {value!r})")
    name = args.name or profiling.default_profile_name(args.model)
    target = _profile_target(args, name)
    if importlib.util.find_spec("vllm") is None:
        raise ValueError("--engine: vLLM is not installed in this environment")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # before vLLM is imported: its lines drown the tables
    steps = grid.num_measured_steps(settings.max_num_batched_tokens)
    console.print(f"profiling {args.model} on vLLM: {args.grid} grid, {steps} measured steps", highlight=False)
    with _progress(console) as progress:
        task = progress.add_task("measuring", total=steps)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        result = profiling.profile_vllm(
            settings,
            grid,
            name=name,
            grid_name=args.grid,
            timing=args.timing,
            statistic=args.statistic,
            progress=advance,
        )
    result.save(target, command=" ".join(["semsched", *sys.argv[1:]]))
    if args.steps_csv is not None:
        result.write_steps_csv(args.steps_csv)
    _show_profile(console, result)
    engine = result.engine
    console.print(
        f"wrote {target}\nreplay this engine: semsched simulate --profile "
        f"{target if args.out is not None else name} --block-size {engine.block_size} "
        f"--gpu-blocks {engine.num_gpu_blocks} --max-batched-tokens {engine.max_num_batched_tokens} "
        f"--max-seqs {engine.max_num_seqs}",
        highlight=False,
    )
    return 0


def _profile_target(args: argparse.Namespace, name: str) -> Path:
    """Where ``semsched profile`` writes (``--out``, else the user profile dir), checked before measuring."""
    if args.out is not None:
        target: Path = args.out
        if target.suffix.lower() not in (".yaml", ".yml", ".json"):
            raise ValueError(f"--out: must end in .yaml, .yml or .json (got {target})")
    else:
        target = user_profile_path(name)
    if target.exists() and not args.force:
        raise ValueError(f"--name/--out: {target} exists; pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(target.parent, os.W_OK):
        raise ValueError(f"--out: cannot write to {target.parent}")
    return target


def _show_profile(console: Console, result: Any) -> None:
    """The fitted coefficients and how well they fit, as tables."""
    engine, config = result.engine, result.model.config
    console.print(
        f"[bold]{result.model.name}[/]: vLLM {engine.engine_version} on {engine.device} ({engine.dtype}), "
        f"{result.grid_name} grid, {len(result.steps)} steps measured in {result.wall_s:.0f} s, "
        f"{result.timing} time",
        highlight=False,
    )
    coefficients = Table("coefficient", "value", "unit", "term (PROSERVE eq. 4-7, plus d_p)")
    for field, unit, term in (
        ("t_c", "s", "every step"),
        ("a_p", "s/token²", "prefill chunk: lq²"),
        ("b_p", "s/token²", "prefill chunk: lq·lkv"),
        ("c_p", "s/token", "prefill chunk: lq"),
        ("a_d", "s/token", "decode: its context lkv"),
        ("b_d", "s", "decode: each"),
        ("d_p", "s", "prefill chunk: each (not in PROSERVE)"),
    ):
        coefficients.add_row(field, f"{getattr(config, field):.4g}", unit, term)
    console.print(coefficients)
    fit = Table("fit on", "samples", "MAPE", "median APE", "p90 APE", "max APE", "RMS residual")
    for label, report in (
        (f"fit samples ({result.statistic} of {result.grid.repeats} repeats)", result.report),
        ("every measured step", result.all_steps_report),
    ):
        fit.add_row(
            label,
            str(report.num_samples),
            f"{report.mape:.1%}",
            f"{report.median_ape:.1%}",
            f"{report.p90_ape:.1%}",
            f"{report.max_ape:.1%}",
            f"{report.residual_rms_s * 1e3:.3g} ms",
        )
    console.print(fit)
    overheads = result.overheads()  # what the profile charges beside the steps, as measured
    for name, what in (
        ("arrival_s", "request intake between steps, per arrival: {} ms"),
        ("new_shape_s", "first step of a batch size new to the engine: +{} ms (left out of the fit)"),
        ("idle_wakeup_s", "a request that finds the engine idle: +{} ms from arrival to first token"),
    ):
        if name in overheads:
            console.print(f"{what.format(f'{overheads[name] * 1e3:.2f}')} (overheads.{name})", highlight=False)
    if result.zero_coefficients:
        console.print(
            f"[dim]{', '.join(result.zero_coefficients)} fitted to 0: too small to resolve in this data[/]"
        )
    if result.repeat_spread > _NOISY_REPEAT_SPREAD:
        console.print(
            f"[yellow]warning:[/] a step's median repeat took {result.repeat_spread:.0%} longer than its fastest "
            "(median over steps): something else competed for the machine, which limits the fit; profile on an "
            "idle machine or raise --repeats",
            highlight=False,
        )


# ---- fidelity ----------------------------------------------------------------------------------------------
def _add_fidelity_parser(sub: Any) -> None:
    fidelity = sub.add_parser(
        "fidelity", help="replay a trace slice through real vLLM and through the simulator, and compare them"
    )
    fidelity.add_argument(
        "--model", default=None, help="model directory (default: a tiny random-weight model in a temp dir)"
    )
    fidelity.add_argument(
        "--profile", default=None, help="latency profile name or path (default: profile the engine first)"
    )
    fidelity.add_argument("--requests", type=int, default=300, help="requests from the trace's start (300)")
    fidelity.add_argument("--rate", type=float, default=None, help="requests/s (default: set by --load)")
    fidelity.add_argument(
        "--load", type=float, default=None,
        help="fraction of the simulated saturation rate to replay at, when --rate is not given (default 0.3)",
    )
    fidelity.add_argument("--policies", default="fcfs,priority-preempt", help="comma-separated policy specs")
    fidelity.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="replays per policy, alternating between policies; the real side is their mean (default 3)",
    )
    fidelity.add_argument("--seed", type=int, default=0, help="tiers and prompt token ids (default 0)")
    fidelity.add_argument(
        "--trace", type=Path, default=None, help="Azure-format CSV (default: the shared conversation trace)"
    )
    fidelity.add_argument("--max-model-len", type=int, default=None, help="engine context; lengths scale to it")
    fidelity.add_argument("--no-prefix-caching", action="store_true", help="turn vLLM's prefix cache off")
    fidelity.add_argument("--threads", type=int, default=1, help="torch threads of the in-process engine (1)")
    fidelity.add_argument("--out", type=Path, default=Path("runs/fidelity"), help="output directory")
    fidelity.set_defaults(handler=_cmd_fidelity)


def _cmd_fidelity(args: argparse.Namespace, console: Console) -> int:
    """Real vLLM vs the simulator on one trace slice; see :mod:`semsched.calibrate.fidelity`."""
    # before vLLM is imported: its INFO lines drown the table, and nothing may leave the machine
    for key, value in (("VLLM_LOGGING_LEVEL", "ERROR"), ("VLLM_NO_USAGE_STATS", "1"), ("HF_HUB_OFFLINE", "1")):
        os.environ.setdefault(key, value)
    from semsched.calibrate import fidelity, fidelity_report

    if args.requests < 2:
        raise ValueError(f"--requests: must be >= 2 (got {args.requests})")
    if args.rate is not None and not args.rate > 0:
        raise ValueError(f"--rate: must be > 0 (got {args.rate})")
    if args.load is not None and args.rate is not None:
        raise ValueError("--load: give --rate or --load, not both")
    if args.load is not None and not 0 < args.load <= 1:
        raise ValueError(f"--load: must be in (0, 1] (got {args.load})")
    if args.threads < 1:
        raise ValueError(f"--threads: must be >= 1 (got {args.threads})")
    if args.repeats is not None and not 1 <= args.repeats <= 20:
        raise ValueError(f"--repeats: must be from 1 to 20 (got {args.repeats})")
    if args.max_model_len is not None and args.max_model_len < 2:
        raise ValueError(f"--max-model-len: must be >= 2 (got {args.max_model_len})")
    if args.model is not None and not Path(args.model).is_dir():
        raise ValueError(f"--model: {args.model} is not a directory")
    policies = tuple(_policies(args.policies))
    if importlib.util.find_spec("vllm") is None:
        raise ValueError("fidelity: vLLM is not installed in this environment (./dev vllm installs it)")
    trace = args.trace if args.trace is not None else find_data_file(fidelity.DEFAULT_TRACE_FILE)
    profile = load_profile_info(args.profile) if args.profile is not None else None
    with tempfile.TemporaryDirectory(prefix="semsched-fidelity-") as scratch:
        model = args.model if args.model is not None else _tiny_model(console, Path(scratch) / "model")
        settings = fidelity.engine_settings(model, profile, max_model_len=args.max_model_len)
        config = fidelity.FidelityConfig(
            settings=settings,
            trace=trace,
            num_requests=args.requests,
            rate_per_s=args.rate,
            load=args.load if args.load is not None else fidelity.DEFAULT_LOAD,
            policies=policies,
            seed=args.seed,
            enable_prefix_caching=not args.no_prefix_caching,
            threads=args.threads,
            repeats=args.repeats if args.repeats is not None else fidelity.DEFAULT_REPEATS,
        )
        with _progress(console) as progress:
            tasks: dict[str, Any] = {}

            def advance(phase: str, done: int, total: int) -> None:
                if phase not in tasks:
                    tasks[phase] = progress.add_task(phase if phase == "profile" else f"vLLM {phase}", total=total)
                progress.update(tasks[phase], completed=done, total=total)

            report = fidelity.run_fidelity(
                config,
                profile,
                profile_path=args.out / "profile.yaml",
                command=" ".join(["semsched", *sys.argv[1:]]),
                log=lambda line: console.print(line, highlight=False),
                progress=advance,
            )
    console.print(fidelity_report.fidelity_table(report))
    for line in fidelity_report.analysis_lines(report):
        console.print(line, highlight=False, soft_wrap=True)
    paths = fidelity_report.write_report(report, args.out)
    console.print(f"report: {paths[0]} (and {', '.join(p.name for p in paths[1:])})")
    return 0


def _tiny_model(console: Console, dest: Path) -> str:
    from semsched.calibrate.tiny_model import make_tiny_model

    console.print(f"model: a tiny random-weight model in {dest}")
    return str(make_tiny_model(dest))


# ---- helpers -------------------------------------------------------------------------------------------------
def _run_all(
    console: Console, workload: Workload, policies: list[str], cluster: ClusterSpec, *, fast_forward: bool
) -> dict[str, PolicyRun]:
    runs: dict[str, PolicyRun] = {}
    with _progress(console) as progress:
        for policy in policies:
            task = progress.add_task(policy, total=len(workload))

            def advance(done: int, total: int, task: Any = task) -> None:
                progress.update(task, completed=done)

            runs |= compare_policies(workload, [policy], cluster, fast_forward=fast_forward, progress=advance)
    return runs


@contextmanager
def _progress(console: Console) -> Iterator[Progress]:
    progress = Progress(
        TextColumn("{task.description:>24}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        yield progress


def _show(console: Console, runs: dict[str, PolicyRun], title: str) -> None:
    console.print(f"[dim]{title}[/]")
    print_comparison(console, {p: r.summary for p, r in runs.items()})


def _write_outputs(console: Console, out: Path, runs: dict[str, PolicyRun], meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results = {p: r.summary for p, r in runs.items()}
    meta = meta | {"wall_s": {p: round(r.wall_s, 3) for p, r in runs.items()}}
    write_json(out / "summary.json", results, meta)
    write_summary_csv(out / "summary.csv", results)
    for index, (policy, run) in enumerate(runs.items()):
        write_requests_csv(out / "requests.csv", [metrics_of(r) for r in run.requests], policy, append=index > 0)
    plot_class_bars(results, out / "comparison.png")
    console.print(
        f"report: {out / 'summary.json'} (and summary.csv, requests.csv)\nplot:   {out / 'comparison.png'}"
    )


def _meta(
    args: argparse.Namespace, workload: Workload | None, cluster: ClusterSpec, rate: float | None
) -> dict[str, Any]:
    return {
        "command": " ".join(["semsched", *sys.argv[1:]]),
        "workload": args.workload,
        "num_requests": len(workload) if workload is not None else None,
        "rate_per_s": rate,
        "duration_s": args.duration,
        "seed": args.seed,
        "profile": cluster.profile,
        "instances": cluster.num_instances,
        "router": cluster.router,
        "scheduler": vars(cluster.scheduler) if hasattr(cluster.scheduler, "__dict__") else str(cluster.scheduler),
        "fast_forward": not args.per_iteration,
    }


if __name__ == "__main__":
    raise SystemExit(main())
