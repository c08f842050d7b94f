"""Aging classes against the full re-key: the same runs, and how much faster.

A policy with ``Policy.aging_class`` (tiered) gets the core's classed waiting queue: at a re-key only each
class's first request is keyed. It must pop exactly what re-keying every waiting request pops. This script runs
each case twice in one process, once as shipped and once with ``aging_class`` turned off (the full re-key), and
compares every request's outcome: state, first scheduled time, finish time, preemptions. It prints the two wall
times beside them and exits 1 if any case differs. A case is ``WORKLOAD@RATE`` (a registered workload or a trace
path, in requests per second), run for each seed and policy spec. The defaults mix both Azure traces, a three-tier
production mix well over saturation and the long-context trace, with tiered's default, fast aging and promotion
after one preemption.

Run: ``.venv/bin/python benchmarks/aging_classes.py`` (about 2 minutes; ``--num-requests`` for a shorter run).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common import ResultTable, dump_json, make_console, target_line

from semsched.core.request import Request
from semsched.policies import make_policy
from semsched.sim.runner import ClusterSpec, build_simulation, prepare_requests
from semsched.workloads import build_workload

LONG_CONTEXT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "long_context_synthetic.jsonl"
DEFAULT_CASES = f"azure-conv-trace@4.2,azure-code-trace@8,production-mix@40,{LONG_CONTEXT}@0.5"
DEFAULT_POLICIES = ",".join(("tiered", "tiered:aging_per_s=1;max_age_boost=3;rekey_s=0.25",
                             "tiered:preemption_limit=1;on_limit=promote"))

Outcome = tuple[str, str, float | None, float | None, int]


@contextmanager
def full_rekey(spec: str) -> Iterator[None]:
    """While it lasts, ``spec``'s policy class says it has no aging classes: the core re-keys every waiting one."""
    cls = type(make_policy(spec))
    shipped = cls.uses_hook

    def uses_hook(self: object, hook: str) -> bool:
        return False if hook == "aging_class" else shipped(self, hook)  # type: ignore[arg-type]

    cls.uses_hook = uses_hook  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.uses_hook = shipped  # type: ignore[method-assign]


def run_case(
    workload: str, rate: float, seed: int, spec: str, num_requests: int | None
) -> tuple[list[Outcome], float]:
    requests: list[Request] = build_workload(workload, rate_per_s=rate, seed=seed,
                                             num_requests=num_requests).to_requests(None)
    cluster = ClusterSpec()
    simulation = build_simulation(spec, cluster, fast_forward=True, prediction=prepare_requests(requests, cluster))
    started = time.perf_counter()
    simulation.run(requests)  # (raises on a stranded request)
    wall_s = time.perf_counter() - started
    return [(r.request_id, r.state.value, r.first_scheduled_time_s, r.finish_time_s, r.num_preemptions)
            for r in requests], wall_s


def parse_cases(text: str) -> list[tuple[str, float]]:
    cases = []
    for item in (part for part in text.split(",") if part):
        workload, sep, rate = item.rpartition("@")
        if not sep or not workload:
            raise SystemExit(f"--cases: {item!r} must look like WORKLOAD@RATE")
        try:
            cases.append((workload, float(rate)))
        except ValueError:
            raise SystemExit(f"--cases: {item!r}: rate {rate!r} is not a number") from None
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES,
                        help="comma-separated WORKLOAD@RATE (requests per second)")
    parser.add_argument("--policies", default=DEFAULT_POLICIES,
                        help="comma-separated policy specs with aging classes")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    parser.add_argument("--num-requests", type=int, default=3000, help="the first N requests of each workload")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    console = make_console()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    specs = [s for s in args.policies.split(",") if s]
    for spec in specs:
        if not make_policy(spec).uses_hook("aging_class"):
            raise SystemExit(f"--policies: {spec!r} has no aging classes (nothing to compare)")
    table = ResultTable("Aging classes against the full re-key (same runs, one process)",
                        ["workload", "rate/s", "seed", "policy", "outcomes", "preemptions", "identical",
                         "full re-key s", "classes s", "speed-up"])
    differing, rows = 0, []
    for workload, rate in parse_cases(args.cases):
        for seed in seeds:
            for spec in specs:
                classed, classed_s = run_case(workload, rate, seed, spec, args.num_requests)
                with full_rekey(spec):
                    full, full_s = run_case(workload, rate, seed, spec, args.num_requests)
                same = classed == full
                differing += not same
                states = Counter(outcome[1] for outcome in classed)
                rows.append({"workload": workload, "rate_per_s": rate, "seed": seed, "policy": spec,
                             "states": dict(states), "identical": same, "full_rekey_s": full_s,
                             "classes_s": classed_s})
                table.add(Path(workload).name, f"{rate:g}", str(seed), spec,
                          ", ".join(f"{n} {state}" for state, n in sorted(states.items())),
                          f"{sum(outcome[4] for outcome in classed):,}", "yes" if same else "**NO**",
                          f"{full_s:.2f}", f"{classed_s:.2f}", f"{full_s / classed_s:.2f}x")
    table.print(console)
    if args.json is not None:
        dump_json(args.json, {"cases": rows, "differing": differing})
    console.print(target_line("cases whose outcomes differ", str(differing), "0", differing == 0), markup=False)
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
