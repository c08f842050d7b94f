"""Batch-size cost: what the first step of a batch size costs vLLM's CPU backend, and whether it stays paid.

vLLM's CPU backend builds a oneDNN matmul primitive for each number of tokens a step computes (the "batch size")
the first time a process runs it, and oneDNN keeps the built primitives in a process-wide cache of
``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` entries (1,024 by default). This script measures, in one fresh process per
cache setting (oneDNN reads the variable once per process):

1. **first time**: a prefill of a size the process never ran, minus the same prefill run right after (the median
   over ``--sizes`` sizes drawn from 1 to the token budget, by size range);
2. **after every size**: once every size from 1 to the budget has run once, in ascending order
   (:meth:`~semsched.calibrate.replay.ServedEngine.warm_batch_sizes`), the same sizes again, minus a repeat right
   after, split into the lower half of the sizes (run longest ago) and the upper half: with a cache too small
   for every size, the early ones were evicted and are built again.

Both settings run on the same model and sizes in the same invocation, one after the other. Each prefill is
alone in its step (one request, ``max_tokens=1``), so the step computes exactly that many tokens; times are the
model's share of the step (``execute_s``). Every number is measured in the run that prints it.

Run: ``.venv/bin/python benchmarks/batch_size_cost.py`` (about a minute on 2 cores; needs ``./dev vllm``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from common import ResultTable, dump_json, make_console, model_dir  # noqa: E402

CACHE_ENV = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
RANGES = ((1, 64), (64, 128), (128, 256), (256, 384), (384, 100_000))


def measure(model: str, num_sizes: int, budget: int, seed: int) -> dict[str, Any]:
    """One process's measurements (run in a child: the cache capacity is fixed when oneDNN first builds one)."""
    from semsched.calibrate.profiling import EngineSettings
    from semsched.calibrate.replay import ServedEngine

    settings = EngineSettings(model=model, max_num_batched_tokens=budget)
    sizes = random.Random(seed).sample(range(1, budget + 1), num_sizes)
    with ServedEngine(settings) as engine:
        counter = iter(range(10**9))

        def prefill_s(size: int) -> float:
            engine.add_request(f"b-{next(counter)}", size, 1)
            first = None
            while engine.has_unfinished():
                step = engine.step()
                if step is not None and first is None:
                    first = step
            assert first is not None and first.composition.num_tokens == size, first
            return first.execute_s

        for _ in range(10):  # allocations and the warm-up size itself
            prefill_s(budget)
        first_time = [(size, prefill_s(size), prefill_s(size)) for size in sizes]
        engine.warm_batch_sizes()
        revisit = [(size, prefill_s(size), prefill_s(size)) for size in sizes]
    return {"capacity": os.environ.get(CACHE_ENV, "default (1024)"), "first": first_time, "revisit": revisit}


def median_ms(pairs: list[list[float]], lo: int = 0, hi: int = 10**9) -> str:
    """Median extra milliseconds of the first run over the repeat, over the sizes in ``[lo, hi)``."""
    extra = [(a - b) * 1e3 for size, a, b in pairs if lo <= size < hi]
    return f"{statistics.median(extra):+.2f}" if extra else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: the tiny random-weight model)")
    parser.add_argument("--sizes", type=int, default=60, help="batch sizes sampled (default 60)")
    parser.add_argument("--budget", type=int, default=512, help="max_num_batched_tokens (default 512)")
    parser.add_argument("--large-cache", type=int, default=None, help="the large setting (default 16 x budget)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write every measurement here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.sizes <= args.budget:
        parser.error(f"--sizes: must be from 1 to --budget ({args.budget}) (got {args.sizes})")
    if args.child:
        print(json.dumps(measure(args.model, args.sizes, args.budget, args.seed)))
        return
    with model_dir(args.model) as model:
        large = args.large_cache or 16 * args.budget
        runs = []
        for capacity in (None, large):
            env = {k: v for k, v in os.environ.items() if k != CACHE_ENV}
            if capacity is not None:
                env[CACHE_ENV] = str(capacity)
            child = subprocess.run(
                [sys.executable, __file__, "--child", "--model", model, "--sizes", str(args.sizes),
                 "--budget", str(args.budget), "--seed", str(args.seed)],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if child.returncode != 0:
                sys.exit(f"measurement with {CACHE_ENV}={capacity} failed:\n{child.stderr[-3000:]}")
            runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
    console = make_console()
    columns = [f"first time, {lo}-{min(hi, args.budget + 1) - 1}" for lo, hi in RANGES if lo <= args.budget]
    table = ResultTable(
        f"Extra ms of a step's model time: first step of a batch size vs a repeat ({args.sizes} sizes, budget "
        f"{args.budget}); then, after every size ran once, the same sizes again vs a repeat",
        ("oneDNN cache", *columns, "first time, all", "after every size, lower half", "upper half"),
    )
    half = args.budget // 2
    for run in runs:
        cells = [median_ms(run["first"], lo, hi) for lo, hi in RANGES if lo <= args.budget]
        table.add(
            str(run["capacity"]),
            *cells,
            median_ms(run["first"]),
            median_ms(run["revisit"], 1, half + 1),
            median_ms(run["revisit"], half + 1),
        )
    table.print(console)
    if args.json:
        dump_json(args.json, {"budget": args.budget, "sizes": args.sizes, "runs": runs})


if __name__ == "__main__":
    main()
