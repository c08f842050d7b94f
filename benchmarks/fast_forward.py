"""Fast-forward against stepping every iteration, for every policy, on traffic nobody tuned for.

The simulator's fast-forward prices a stretch of steps at once when nothing can change over it (a pure-decode
stretch the policy promises is stable, a run of speculative rounds whose acceptance draws are seeded per
request). It must give what stepping every iteration gives. ``sim_throughput.py`` checks that on the Azure
conversation trace and the golden tests on fixed scenarios. This script checks it on the other traffic the project
ships, for every registered policy: each case is run in one process with fast-forward (as shipped) and per
iteration, and every request's state, first scheduled time, finish time, preemptions and token emission times must
match. A stranded request stops the run with an error.

``--both-builds`` also runs the fast-forward side again in a child process on the pure-Python sources
(``SEMSCHED_PURE_PYTHON=1``) and compares each run's digest with the compiled core's.

Default cases, each about 0.8-1.5x the instance's fcfs saturation rate (measured on the first 1,500 requests):
both Azure traces, the production mix with its four tiers, bursty gamma arrivals, seed 000's emergency-department
spikes, two-turn MT-Bench conversations, Spec-Bench and MBPP prompts under EAGLE speculation (logged rounds
replayed, fitted ones drawn), the Azure conversation trace under SpS-68M speculation with fitted rounds, and the
long-context trace.

Run: ``.venv/bin/python benchmarks/fast_forward.py`` (about 6 minutes; 15 more with ``--both-builds``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import make_console, target_line
from shortcuts import (
    LONG_CONTEXT,
    case_arguments,
    compare,
    digest,
    parse_cases,
    report,
    run_case,
    seeds_of,
    specs_of,
)

from semsched.compiled import PURE_PYTHON_ENV, status

DEFAULT_CASES = ",".join((
    "azure-conv-trace@3.2", "azure-code-trace@6", "production-mix@40", "gamma-conv@3.2", "ktas-ed@34",
    "mt-bench-turns@20", "spec-bench:log=eagle@14+eagle", "mbpp-spec@45+eagle",
    "azure-conv-trace@2.4+sps-68m:fitted",
    f"{LONG_CONTEXT}@0.5",
))


def shipped_digests(args: argparse.Namespace) -> list[str]:
    """The fast-forward run of every case, seed and policy, in the order ``compare`` takes them: their digests."""
    return [digest(run_case(case, seed, spec, args.num_requests)[0])
            for case in parse_cases(args.cases) for seed in seeds_of(args) for spec in specs_of(args)]


def pure_python_digests(args: argparse.Namespace) -> list[str]:
    """:func:`shipped_digests` in a child process on the pure-Python sources."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "digests.json"
        command = [sys.executable, __file__, "--cases", args.cases, "--policies", args.policies, "--seeds",
                   args.seeds, "--num-requests", str(args.num_requests), "--digests-to", str(out)]
        subprocess.run(command, check=True, env={**os.environ, PURE_PYTHON_ENV: "1"})
        digests: list[str] = json.loads(out.read_text())
        return digests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    case_arguments(parser, "all", "comma-separated policy specs, or 'all' (every registered policy)")
    parser.set_defaults(cases=DEFAULT_CASES, seeds="0", num_requests=1500)
    parser.add_argument("--both-builds", action="store_true",
                        help="also compare the compiled core's fast-forward runs with the pure-Python sources'")
    parser.add_argument("--digests-to", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.digests_to is not None:  # (the child of --both-builds)
        args.digests_to.write_text(json.dumps(shipped_digests(args)))
        return 0
    specs = specs_of(args)
    result = compare("Fast-forward against every iteration (same runs, one process)", ("fast-forward", "per step"),
                     lambda spec: contextlib.nullcontext(), parse_cases(args.cases), seeds_of(args), specs,
                     args.num_requests, long_way_fast_forward=False)
    console = make_console()
    code = report(console, result, args.json)
    if args.both_builds:
        build = status()
        if not build.in_use:
            console.print(f"--both-builds: this process runs the Python sources ({build.reason}): "
                          "nothing to compare", markup=False)
            return 1
        pure = pure_python_digests(args)
        differing = sum(row["digest"] != other for row, other in zip(result.rows, pure, strict=True))
        console.print(target_line("runs whose outcomes differ between the compiled core and the Python sources",
                                  f"{differing} of {len(pure)}", "0", differing == 0), markup=False)
        code = code or int(differing > 0)
    return code


if __name__ == "__main__":
    sys.exit(main())
