"""Command line: ``semsched simulate | sweep | demo | policies | profiles | workloads``.

Bad input (unknown policy, malformed trace row, negative rate, ...) prints one ``error:`` line naming the
field and exits with status 2; it never shows a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from semsched.core.request import InvalidRequestError
from semsched.core.scheduler import SchedulerConfig
from semsched.latency import ProfileError, list_profiles
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
from semsched.workloads import WORKLOADS, Workload, WorkloadError, build_workload

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
    # ';' separates parameters inside one spec on the command line, ',' separates specs
    specs = [s.strip().replace(";", ",") for s in text.split(",") if s.strip()]
    if not specs:
        raise PolicyError("--policy: give at least one policy")
    for spec in specs:
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
    for name in list_profiles():
        console.print(name)
    return 0


def _cmd_workloads(args: argparse.Namespace, console: Console) -> int:
    for name in sorted(WORKLOADS):
        console.print(name)
    console.print("(or a path to an Azure-format .csv or Mooncake-format .jsonl trace)")
    return 0


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
