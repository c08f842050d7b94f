"""``semsched fidelity``: replay a trace slice through real vLLM and through the simulator, and compare them."""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from semsched.cli.common import UsageError, check_seed, command_line, out_path, policy_specs, progress_bars
from semsched.latency import load_profile_info
from semsched.sim.engine import ProgressCallback
from semsched.workloads import find_data_file


def register(sub: Any) -> None:
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
        "--load",
        type=float,
        default=None,
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
    fidelity.add_argument("--out", type=out_path, default=Path("runs/fidelity"), help="output directory")
    fidelity.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Real vLLM vs the simulator on one trace slice; see :mod:`semsched.calibrate.fidelity`."""
    check_seed(args.seed)
    # before vLLM is imported: its INFO lines drown the table, and nothing may leave the machine
    for key, value in (("VLLM_LOGGING_LEVEL", "ERROR"), ("VLLM_NO_USAGE_STATS", "1"), ("HF_HUB_OFFLINE", "1")):
        os.environ.setdefault(key, value)
    from semsched.calibrate import fidelity, fidelity_report

    if args.requests < 2:
        raise UsageError(f"--requests: must be >= 2 (got {args.requests})")
    if args.rate is not None and not args.rate > 0:
        raise UsageError(f"--rate: must be > 0 (got {args.rate})")
    if args.load is not None and args.rate is not None:
        raise UsageError("--load: give --rate or --load, not both")
    if args.load is not None and not 0 < args.load <= 1:
        raise UsageError(f"--load: must be in (0, 1] (got {args.load})")
    if args.threads < 1:
        raise UsageError(f"--threads: must be >= 1 (got {args.threads})")
    if args.repeats is not None and not 1 <= args.repeats <= 20:
        raise UsageError(f"--repeats: must be from 1 to 20 (got {args.repeats})")
    if args.max_model_len is not None and args.max_model_len < 2:
        raise UsageError(f"--max-model-len: must be >= 2 (got {args.max_model_len})")
    if args.model is not None and not Path(args.model).is_dir():
        raise UsageError(f"--model: {args.model} is not a directory")
    policies = tuple(policy_specs(args.policies, "--policies"))
    if importlib.util.find_spec("vllm") is None:
        raise UsageError("fidelity: vLLM is not installed in this environment (./dev vllm installs it)")
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
        with progress_bars(console) as bars:
            phases: dict[str, ProgressCallback] = {}

            def advance(phase: str, done: int, total: int) -> None:
                if phase not in phases:
                    phases[phase] = bars.start(phase if phase == "profile" else f"vLLM {phase}", total)
                phases[phase](done, total)

            report = fidelity.run_fidelity(
                config,
                profile,
                profile_path=args.out / "profile.yaml",
                command=command_line(),
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
