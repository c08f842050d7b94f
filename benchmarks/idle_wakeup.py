"""Idle wake-up: how much longer a request takes to its first token when it finds the engine idle.

One warmed engine (the replay's: semsched adapter, detokenisation on, every batch size run once) serves lone
requests of ``--prompt`` tokens (``max_tokens=1``) with :func:`semsched.calibrate.profiling.wakeup_times_s`, the
profiler's own measurement, once per idle time in ``--idle-ms``: alternately one arriving as the previous request
finished (busy) and one arriving after the serving loop slept that long (idle). Per idle time it prints the median
arrival-to-first-token time of both and their difference, the cost the simulator charges as
``overheads.idle_wakeup_s``. Idle times run in the order given, each ``--trials`` pairs. Every number is measured
in the run that prints it.

Run: ``.venv/bin/python benchmarks/idle_wakeup.py`` (about 30 s on 2 cores; needs ``./dev vllm``).
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from common import ResultTable, at_least, dump_json, make_console, model_dir  # noqa: E402


def measure(model: str, idle_ms: list[float], trials: int, prompt: int) -> dict[str, list[list[float]]]:
    """Per idle time: ``[busy times, idle times]`` in seconds."""
    from semsched.calibrate.fidelity import shape_cache_capacity
    from semsched.calibrate.profiling import EngineSettings, wakeup_times_s
    from semsched.calibrate.replay import ServedEngine, set_torch_threads

    settings = EngineSettings(model=model)
    shape_cache_capacity(settings)
    set_torch_threads(1)
    results: dict[str, list[list[float]]] = {}
    with ServedEngine(settings) as engine:
        engine.warm_batch_sizes()
        for idle in idle_ms:
            busy, slept = wakeup_times_s(engine, trials, prompt, idle_s=idle / 1000.0)
            results[f"{idle:g}"] = [busy, slept]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: a tiny random-weight model)")
    parser.add_argument("--idle-ms", default="2,20,100,500", help="idle times to test, ms (default 2,20,100,500)")
    parser.add_argument("--trials", type=at_least(1), default=12, help="busy/idle pairs per idle (default 12)")
    parser.add_argument("--prompt", type=at_least(1), default=256, help="prompt tokens per request (default 256)")
    parser.add_argument("--json", type=Path, default=None, help="write every time here")
    args = parser.parse_args()
    try:
        idle_ms = [float(value) for value in args.idle_ms.split(",")]
    except ValueError:
        parser.error(f"--idle-ms: expected comma-separated numbers (got {args.idle_ms!r})")
    if not idle_ms or any(not value > 0 for value in idle_ms):
        parser.error(f"--idle-ms: every idle time must be > 0 (got {args.idle_ms!r})")
    console = make_console()
    with model_dir(args.model) as model:
        results = measure(model, idle_ms, args.trials, args.prompt)
    table = ResultTable(
        f"Idle wake-up: lone {args.prompt}-token requests, arrival to first token, median of {args.trials} each",
        ("idle before arrival", "busy loop (ms)", "after idling (ms)", "wake-up cost (ms)"),
    )
    for idle, (busy, slept) in results.items():
        busy_ms, slept_ms = 1e3 * statistics.median(busy), 1e3 * statistics.median(slept)
        table.add(f"{idle} ms", f"{busy_ms:.2f}", f"{slept_ms:.2f}", f"{slept_ms - busy_ms:+.2f}")
    table.print(console)
    if args.json is not None:
        dump_json(args.json, {"prompt_tokens": args.prompt, "trials": args.trials, "times_s": results})


if __name__ == "__main__":
    main()
