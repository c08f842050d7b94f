"""Machine noise: how steady is this machine's CPU speed from one second to the next?

A fixed single-threaded workload (a 200x200 float64 matrix product, numpy) runs back to back for ``--seconds``;
the script counts how many products each one-second window completes. On a machine the process has to itself
every window completes the same work within a few percent. On a shared VM the count drifts: then an engine
replay's step times drift too, and `semsched fidelity` cannot separate a simulator error smaller than that drift
from the machine's own noise. Run it before trusting a fidelity or profiling figure, and with nothing else
running (this script keeps one core busy).

Prints the per-window counts, their median, the slowest and fastest window relative to the median, the
coefficient of variation, and the target line: slowest window >= 0.9 x the fastest (steady enough for a 10 %
fidelity comparison). Every number is measured in the run. Run: ``.venv/bin/python benchmarks/machine_noise.py``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # one core: before numpy loads BLAS
    os.environ[_name] = "1"

import numpy as np  # noqa: E402
from common import ResultTable, dump_json, make_console, target_line  # noqa: E402

MATRIX_SIZE = 200
STEADY_RATIO = 0.9


def measure(seconds: int, window_s: float = 1.0) -> list[int]:
    """Products completed in each of ``seconds`` consecutive windows of ``window_s``."""
    rng = np.random.default_rng(0)
    matrix = rng.random((MATRIX_SIZE, MATRIX_SIZE))
    counts = []
    for _ in range(seconds):
        started, done = time.perf_counter(), 0
        while time.perf_counter() - started < window_s:
            matrix @ matrix
            done += 1
        counts.append(done)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30, help="one-second windows to measure (default 30)")
    parser.add_argument("--json", type=Path, default=None, help="write the raw counts here")
    args = parser.parse_args()
    if args.seconds < 2:
        parser.error(f"--seconds: must be >= 2 (got {args.seconds})")
    console = make_console()
    counts = measure(args.seconds)
    values = np.array(counts, dtype=float)
    median = float(np.median(values))
    table = ResultTable(
        f"Machine noise: {MATRIX_SIZE}x{MATRIX_SIZE} products per 1 s window, {args.seconds} windows",
        ("windows", "median / s", "slowest / median", "fastest / median", "slowest / fastest", "CV"),
    )
    table.add(
        str(len(counts)),
        f"{median:,.0f}",
        f"{values.min() / median:.2f}",
        f"{values.max() / median:.2f}",
        f"{values.min() / values.max():.2f}",
        f"{values.std() / values.mean():.1%}",
    )
    table.print(console)
    console.print("per window: " + " ".join(str(c) for c in counts), highlight=False)
    ratio = float(values.min() / values.max())
    steady = ratio >= STEADY_RATIO
    console.print(target_line("slowest / fastest window", f"{ratio:.2f}", f">= {STEADY_RATIO}", steady))
    if args.json is not None:
        dump_json(args.json, {"matrix_size": MATRIX_SIZE, "counts": counts})


if __name__ == "__main__":
    main()
