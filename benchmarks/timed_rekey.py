"""Keys re-keyed when due against the full re-key: the same runs, and how much faster.

A policy whose waiting keys change at times known in advance (``Policy.waiting_key_until``: the cost-index
policies with ``slo_slack``, whose protected requests go first once their TTFT deadline is at risk and back to
the index order once it has passed) gets the core's timed waiting queue: at a re-key only the requests enqueued
since the last one and those whose time has come are keyed. It must pop exactly what re-keying every waiting
request pops. This script runs each case twice in one process, once as shipped and once with
``waiting_key_until`` turned off (the full re-key), and compares every request's outcome: state, first scheduled
time, finish time, preemptions. It prints how many times the shipped run asked a key's time (so that an identical
run is not one that never re-keyed), the two wall times, and exits 1 if any case differs. Cases as in
``aging_classes.py``: both Azure traces, a three-tier production mix well over saturation and the long-context
trace, each with TTFT SLOs on three of its four tiers.

Run: ``.venv/bin/python benchmarks/timed_rekey.py`` (about 2 minutes; ``--num-requests`` for a shorter run).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from common import make_console
from shortcuts import case_arguments, compare, hook_turned_off, parse_cases, report, seeds_of, specs_of

from semsched.core.policy import describes_waiting_keys
from semsched.policies import make_policy

DEFAULT_POLICIES = ",".join(("gittins:slo_slack=0.5", "gittins:slo_slack=0.2;displace=true",
                             "mean:slo_slack=0.8;protect_priority=2;check_s=0.25"))


@contextmanager
def counted(specs: list[str], count: list[int]) -> Iterator[None]:
    """While it lasts, each spec's policy class counts the times its ``waiting_key_until`` is asked."""
    shipped: dict[type, Callable[..., float]] = {}
    for spec in specs:
        cls = type(make_policy(spec))
        if cls in shipped:
            continue
        shipped[cls] = original = cls.waiting_key_until

        def asked(self: Any, request: Any, now_s: float, original: Callable[..., float] = original) -> float:
            count[0] += 1
            return original(self, request, now_s)

        cls.waiting_key_until = asked  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, original in shipped.items():
            cls.waiting_key_until = original  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    case_arguments(parser, DEFAULT_POLICIES, "comma-separated policy specs whose keys say when they change")
    args = parser.parse_args(argv)
    seeds, specs = seeds_of(args), specs_of(args)
    for spec in specs:
        policy = make_policy(spec)
        if policy.rekey_interval_s is None or policy.uses_hook("waiting_order") \
                or not describes_waiting_keys(policy, "waiting_key_until"):
            raise SystemExit(f"--policies: {spec!r} does not re-key the core's keyed queue by when keys change "
                             "(nothing to compare)")
    count = [0]
    with counted(specs, count):
        result = compare("Keys re-keyed when due against the full re-key (same runs, one process)",
                         ("when due", "full re-key"), functools.partial(hook_turned_off, hook="waiting_key_until"),
                         parse_cases(args.cases), seeds, specs, args.num_requests,
                         uses=("key times asked", lambda: count[0]))
    return report(make_console(), result, args.json)


if __name__ == "__main__":
    sys.exit(main())
