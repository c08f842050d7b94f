"""Engine speed drift: does a vLLM engine's step time move with the machine, or with the engine instance?

Two (``--engines``) engines start in this process, each warmed (every batch size once), and take turns running the
engine-speed probe of ``semsched fidelity``
(:meth:`~semsched.calibrate.replay.ServedEngine.probe_step_s`: the median
wall time of 200 decode-only steps of 4 requests, about 0.6 s), ``--rounds`` rounds, in alternating order. Then:

* **over time**: each round's mean over the engines, relative to the median round: how far the same step's time
  moves from one second to the next on this machine;
* **between engines**: each engine's median of (its probe / the round's mean): whether one engine instance is
  steadily faster than another (memory placement, allocator state) or they move together (the machine).

On this 2-core VM (benchmarks/README.md) the two engines agreed within 0.1-1.8 % while the rounds ranged over
0.67-1.53 x the median round: the same step's time moves with the machine, not with the engine instance, and a
replay cannot be predicted closer than that by a profile measured at another moment, whatever the simulator
does. Unlike ``machine_noise.py`` (a numpy loop) it measures the engine's own Python-heavy steps, which is what
``semsched fidelity`` compares.

* **a meter?** After the probes, each round also times two fixed numpy kernels on the same core: a
  cache-resident one (200 products of a 200x200 float64 matrix, as ``machine_noise.py``) and a memory-streaming
  one (4 sums over a 256 MB array). If either moved with the probe from round to round, it could measure the
  machine's speed during a replay without touching the engine; the correlations say whether it does.

Every number is measured in the run that prints it.

Run: ``.venv/bin/python benchmarks/engine_speed_drift.py`` (about a minute on 2 cores; needs ``./dev vllm``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from common import ResultTable, at_least, dump_json, make_console, model_dir  # noqa: E402

CACHE_MATRIX = 200
CACHE_PRODUCTS = 200
STREAM_FLOATS = 32 * 1024 * 1024  # 256 MB of float64: far more than the last-level cache
STREAM_SUMS = 4


def kernel_times_s(matrix: Any, stream: Any) -> tuple[float, float]:
    """Seconds for the cache-resident kernel and for the memory-streaming kernel."""
    import time

    started = time.perf_counter()
    for _ in range(CACHE_PRODUCTS):
        matrix @ matrix
    cached = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(STREAM_SUMS):
        stream.sum()
    return cached, time.perf_counter() - started


def measure(model: str, engines: int, rounds: int) -> tuple[list[list[float]], list[tuple[float, float]]]:
    """Probe step seconds, one row per round, one column per engine (in engine order); and per round the two
    kernels' seconds (:func:`kernel_times_s`)."""
    import numpy as np

    from semsched.calibrate.fidelity import shape_cache_capacity
    from semsched.calibrate.profiling import EngineSettings
    from semsched.calibrate.replay import ServedEngine, set_torch_threads

    settings = EngineSettings(model=model)
    shape_cache_capacity(settings)
    set_torch_threads(1)
    rng = np.random.default_rng(0)
    matrix, stream = rng.random((CACHE_MATRIX, CACHE_MATRIX)), rng.random(STREAM_FLOATS)
    started: list[ServedEngine] = []
    kernels: list[tuple[float, float]] = []
    try:
        for _ in range(engines):
            engine = ServedEngine(settings)
            started.append(engine)
            engine.warm_batch_sizes()
        table = []
        for index in range(rounds):
            order = range(engines) if index % 2 == 0 else reversed(range(engines))
            times = {i: started[i].probe_step_s() for i in order}
            table.append([times[i] for i in range(engines)])
            kernels.append(kernel_times_s(matrix, stream))
        return table, kernels
    finally:
        for engine in started:
            engine.close()


KERNELS = ("cache-resident kernel", "memory-streaming kernel")


def summarise(table: list[list[float]], kernels: list[tuple[float, float]]) -> dict[str, Any]:
    import numpy as np

    times = np.array(table, dtype=float)
    round_means = times.mean(axis=1)
    median_round = float(np.median(round_means))
    relative = times / round_means[:, None]
    kernel_times = np.array(kernels, dtype=float)
    kernel_relative = kernel_times / np.median(kernel_times, axis=0)
    return {
        "median_step_s": median_round,
        "rounds_vs_median": (round_means / median_round).tolist(),
        "engine_vs_round": np.median(relative, axis=0).tolist(),
        "engine_vs_round_sd": relative.std(axis=0).tolist(),
        "kernels_vs_median": {name: kernel_relative[:, i].tolist() for i, name in enumerate(KERNELS)},
        "kernel_correlation_with_probe": {
            name: float(np.corrcoef(round_means, kernel_times[:, i])[0, 1]) for i, name in enumerate(KERNELS)
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: a tiny random-weight model)")
    parser.add_argument("--engines", type=at_least(2), default=2, help="engines alive at once (default 2)")
    parser.add_argument("--rounds", type=at_least(3), default=40, help="probe rounds (default 40)")
    parser.add_argument("--json", type=Path, default=None, help="write every probe here")
    args = parser.parse_args()
    console = make_console()
    with model_dir(args.model) as model:
        table, kernels = measure(model, args.engines, args.rounds)
    summary = summarise(table, kernels)
    over_time = summary["rounds_vs_median"]
    result = ResultTable(
        f"Engine speed drift: {args.engines} engines, {args.rounds} alternating probe rounds "
        f"(median probe step {summary['median_step_s'] * 1e3:.2f} ms)",
        ("what", "min", "median", "max"),
    )
    result.add(
        "round mean / median round (the machine over time)",
        f"{min(over_time):.3f}",
        "1.000",
        f"{max(over_time):.3f}",
    )
    between = summary["engine_vs_round"]
    result.add(
        "engine / round mean, median over rounds (instance effect)",
        f"{min(between):.3f}",
        f"{sorted(between)[len(between) // 2]:.3f}",
        f"{max(between):.3f}",
    )
    for name in KERNELS:
        moves = summary["kernels_vs_median"][name]
        result.add(f"{name} / its median round (correlation with the probe "
                   f"{summary['kernel_correlation_with_probe'][name]:+.2f})",
                   f"{min(moves):.3f}", "1.000", f"{max(moves):.3f}")
    result.print(console)
    console.print("rounds / median round: " + " ".join(f"{r:.2f}" for r in over_time), highlight=False)
    spread = max(over_time) - min(over_time)
    instance = max(abs(b - 1.0) for b in between)
    console.print(
        f"the machine moved the same step by {spread:.0%} (slowest - fastest round) while the engines differed "
        f"from each other by at most {instance:.1%}: "
        + ("the drift is the machine's" if instance < spread / 4 else "the engine instances differ too")
    )
    if args.json is not None:
        dump_json(args.json, {"probes_s": table, "kernels_s": kernels, **summary})


if __name__ == "__main__":
    main()
