"""``semsched demo``: the main job. Runs the ``demo`` experiment (every baseline policy on the embedded
default workload at ~90 % load), prints the comparison and writes its report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from semsched.cli.common import out_path
from semsched.cli.reproduce import reproduce
from semsched.experiments.demo import DURATION_S, QUICK_DURATION_S, RATE_PER_S, WORKLOAD
from semsched.metrics import class_table, print_comparison


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo", help="a one-minute comparison of every policy on the embedded default workload"
    )
    parser.add_argument("--out", type=out_path, default=Path("runs/demo"),
                        help="output directory (default runs/demo)")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_DURATION_S:g} s of arrivals, not {DURATION_S:g}"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    duration_s = QUICK_DURATION_S if args.quick else DURATION_S
    console.print(
        f"[bold]semsched demo[/]: the {WORKLOAD} workload (embedded Azure-conversation fit, tiers SYSTEM, "
        f"PREMIUM, STANDARD, BACKGROUND) at {RATE_PER_S:g}/s for {duration_s:g} s, every baseline policy",
        highlight=False,
    )
    outcome = reproduce(console, "demo", args.out, quick=args.quick, seed=0)
    summaries = {run.policy: run.run.summary for run in outcome.context.runs if run.figure_id == "comparison"}
    print_comparison(console, summaries)
    console.print(class_table(summaries, "ttft_p90"))
    return 0
