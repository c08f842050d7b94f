"""semantic's certificates against a scan of every running request at every step: the same runs, how often a
certificate priced a step, and how much faster.

semantic's ``step_budget`` may skip computing every running decode's key: a full scan of a batch of decodes in key
order certifies for how many more tokens that order holds, and a later step checks each request's progress
instead (``Semantic._certify``). It must find what the scan finds. This script runs each case twice in one
process, once as shipped and once with no certificate ever built, and compares every request's outcome: state,
first scheduled time, finish time, preemptions. It prints how many steps a certificate priced, both wall times,
and exits 1 if any case differs. The defaults mix both Azure traces, a three-tier production mix well over
saturation and the long-context trace, with semantic's default (stage_aware=budget), the true lengths, and the
paper's stage-aware rule at its own level (stage_aware=level). ``--eager`` builds a certificate wherever one may
hold, so that many more steps are certified.

Run: ``.venv/bin/python benchmarks/semantic_certificates.py`` (about 2 minutes; ``--num-requests`` for a shorter
run).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from common import make_console
from shortcuts import case_arguments, compare, parse_cases, report, seeds_of, specs_of

from semsched.policies import make_policy
from semsched.policies import semantic as semantic_module
from semsched.policies.semantic import Semantic

DEFAULT_POLICIES = "semantic,semantic:length=oracle,semantic:stage_aware=level"


@contextmanager
def scanning_every_step(spec: str) -> Iterator[None]:
    """While it lasts, semantic builds no certificate: every step scans its running requests."""
    shipped = Semantic._certify
    Semantic._certify = lambda self, running: None  # type: ignore[method-assign,assignment,return-value]
    try:
        yield
    finally:
        Semantic._certify = shipped  # type: ignore[method-assign]


class _Uses:
    """How many steps a certificate priced, over the whole process."""

    def __init__(self) -> None:
        self.count = 0
        shipped = Semantic._certified_scan

        def counted(policy: Semantic, *args: Any) -> Any:
            best = shipped(policy, *args)
            self.count += best is not None
            return best

        Semantic._certified_scan = counted  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    case_arguments(parser, DEFAULT_POLICIES, "comma-separated semantic policy specs")
    parser.add_argument("--eager", action="store_true",
                        help="a certificate at every scan that may build one, however short the list or its use "
                             "(the backoff and the shortest list off): more certified steps, the same outcomes")
    args = parser.parse_args(argv)
    if args.eager:
        semantic_module._CERTIFICATE_PAYS, semantic_module._MIN_CERTIFIED_RUNNING = 0, 1
    seeds, specs = seeds_of(args), specs_of(args)
    for spec in specs:
        policy = make_policy(spec)
        if not isinstance(policy, Semantic) or not policy.uses_hook("step_budget"):
            raise SystemExit(f"--policies: {spec!r} is not semantic with a stage-aware step budget "
                             f"(no certificate to compare)")
    uses = _Uses()
    result = compare("semantic's certificates against a scan at every step (same runs, one process)",
                     ("certificates", "scans"), scanning_every_step, parse_cases(args.cases), seeds, specs,
                     args.num_requests, uses=("steps certified", lambda: uses.count))
    return report(make_console(), result, args.json)


if __name__ == "__main__":
    sys.exit(main())
