"""``semsched profile``: measure a real engine's step latencies and fit a batch latency profile to them."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from semsched.cli.common import UsageError, check_seed, command_line, out_path, progress_bars
from semsched.latency import user_profile_path

# above this spread between a step's repeats, the noise is as large as the effects the fit has to resolve
_NOISY_REPEAT_SPREAD = 0.25


def register(sub: Any) -> None:
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
    profile.add_argument("--out", type=out_path, default=None,
                         help="write here (.yaml/.yml/.json), not the user dir")
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
    profile.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Measure, fit, write. Everything that can be checked is checked before the engine starts."""
    if args.engine != "vllm":
        raise UsageError(f"--engine: only 'vllm' can be profiled (got {args.engine!r})")
    check_seed(args.seed)
    if not Path(args.model).is_dir():
        raise UsageError(f"--model: {args.model} is not a directory")
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
            raise UsageError(f"{option}: expected one of {', '.join(allowed)} (got {value!r})")
    name = args.name or profiling.default_profile_name(args.model)
    target = _profile_target(args, name)
    if importlib.util.find_spec("vllm") is None:
        raise UsageError("--engine: vLLM is not installed in this environment")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # before vLLM is imported: its lines drown the tables
    steps = grid.num_measured_steps(settings.max_num_batched_tokens)
    console.print(f"profiling {args.model} on vLLM: {args.grid} grid, {steps} measured steps", highlight=False)
    with progress_bars(console) as bars:
        advance = bars.start("measuring", steps)
        result = profiling.profile_vllm(
            settings,
            grid,
            name=name,
            grid_name=args.grid,
            timing=args.timing,
            statistic=args.statistic,
            progress=advance,
        )
    result.save(target, command=command_line())
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
            raise UsageError(f"--out: must end in .yaml, .yml or .json (got {target})")
    else:
        target = user_profile_path(name)
    if target.exists() and not args.force:
        raise UsageError(f"--name/--out: {target} exists; pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(target.parent, os.W_OK):
        raise UsageError(f"--out: cannot write to {target.parent}")
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
