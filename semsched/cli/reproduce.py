"""``semsched reproduce NAME``: rerun a document's experiments and write the report of ../shared/EXPERIMENTS.md."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from semsched.cli.common import (
    UsageError,
    add_parallel_args,
    check_seed,
    command_line,
    out_path,
    parallel_runner,
    points_bar,
)
from semsched.experiments import EXPERIMENTS, run_experiment
from semsched.experiments.framework import ExperimentOutcome
from semsched.sim.parallel import PointRunner


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "reproduce",
        help="rerun a seed document's experiments (or the demo) and write report.md, results.json and PNGs",
    )
    parser.add_argument("name", nargs="?", help="experiment name (see --list)")
    parser.add_argument("--list", action="store_true", help="list the experiments, one line each")
    parser.add_argument("--quick", action="store_true", help="a reduced grid that runs in under two minutes")
    parser.add_argument("--out", type=out_path, default=None,
                        help="output directory (default runs/reproduce/NAME)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the workloads (default 0)")
    parser.add_argument("--workload", default=None, metavar="SPEC",
                        help="a workload of yours for the experiments that take one (proserve: a Mooncake-format "
                             ".jsonl trace, or any workload spec)")
    parser.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="DOCS_DIR",
        help="also copy the report to DOCS_DIR/NAME.md with its PNGs under DOCS_DIR/img (docs/reproductions)",
    )
    add_parallel_args(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    if args.list:
        if args.name:
            raise UsageError(f"--list: takes no experiment name (got {args.name!r}); give --list alone")
        for name in EXPERIMENTS.names():
            console.print(f"[bold]{name}[/]  {EXPERIMENTS.get(name).summary}", highlight=False)
        return 0
    if not args.name:
        raise UsageError("reproduce: name an experiment (semsched reproduce --list shows them)")
    EXPERIMENTS.get(args.name)  # an unknown name fails before anything runs
    check_seed(args.seed)
    if args.record is not None and args.quick:
        raise UsageError("--record: record full runs only (drop --quick)")
    out = args.out if args.out is not None else Path("runs/reproduce") / args.name
    with parallel_runner(args) as runner:
        outcome = reproduce(console, args.name, out, quick=args.quick, seed=args.seed, workload=args.workload,
                            runner=runner, show_progress=args.progress)
    if args.record is not None:
        from semsched.experiments.report import record

        console.print(f"recorded: {record(outcome.out, args.record, args.name)}")
    return 0


def reproduce(console: Console, name: str, out: Path, *, quick: bool, seed: int,
              workload: str | None = None, runner: PointRunner | None = None,
              show_progress: bool = False) -> ExperimentOutcome:
    """Run one experiment on ``runner`` (default: here) with a progress bar over its simulations, then print where
    the report is and its headlines."""
    with points_bar(show_progress) as bar:
        outcome = run_experiment(name, out, quick=quick, seed=seed, progress=bar, command=command_line(),
                                 workload=workload, runner=runner)
    console.print(f"report: {outcome.report} (and results.json, requests.csv, one PNG per figure)")
    for line in outcome.headlines:
        console.print(f"  {line}", highlight=False)
    return outcome
