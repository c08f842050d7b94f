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
import functools
import sys

from common import make_console
from shortcuts import case_arguments, compare, hook_turned_off, parse_cases, report, seeds_of, specs_of

from semsched.policies import make_policy

DEFAULT_POLICIES = ",".join(("tiered", "tiered:aging_per_s=1;max_age_boost=3;rekey_s=0.25",
                             "tiered:preemption_limit=1;on_limit=promote"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    case_arguments(parser, DEFAULT_POLICIES, "comma-separated policy specs with aging classes")
    args = parser.parse_args(argv)
    seeds, specs = seeds_of(args), specs_of(args)
    for spec in specs:
        if not make_policy(spec).uses_hook("aging_class"):
            raise SystemExit(f"--policies: {spec!r} has no aging classes (nothing to compare)")
    result = compare("Aging classes against the full re-key (same runs, one process)", ("classes", "full re-key"),
                     functools.partial(hook_turned_off, hook="aging_class"), parse_cases(args.cases), seeds, specs,
                     args.num_requests)
    return report(make_console(), result, args.json)


if __name__ == "__main__":
    sys.exit(main())
