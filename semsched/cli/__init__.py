"""Command line: ``semsched simulate | sweep | demo | reproduce | advise | profile | fidelity | policies |
profiles | workloads | tiers | urgency | length | lengths | bench | gateway``, one module per command, each with
``register(subparsers)`` and a handler.

Bad input (unknown policy, malformed trace row, negative rate, an output path that is a file, ...) prints one
``error:`` line naming the field and the limit and exits with status 2, with no traceback. Only
:class:`~semsched.core.errors.SemschedError` is treated so: any other exception is a bug and keeps its traceback.

Modules: ``simulate``, ``sweep``, ``demo``, ``reproduce`` (:mod:`semsched.experiments`), ``advise``
(:mod:`semsched.experiments.advise`), ``bench``
(:mod:`semsched.bench`), ``gateway`` (:mod:`semsched.gateway`, served with uvicorn), ``profile`` and ``fidelity``
(:mod:`semsched.calibrate`), ``listing`` (``policies``, ``profiles``, ``workloads``: each parameter with its type,
default and doc, from the registries; ``tiers [PATH] [--yaml]``: a tier table shown or written as a template),
``urgency`` (``train``, ``eval``, ``cost``), ``length eval`` (seed 000's buckets), ``lengths eval`` (seed 002's
distribution predictors); ``predictions`` (what a policy does with predictions a workload does not carry);
``common`` (run options and the checks made before any run, each error naming the option; ``--workers`` and
``--ray``, which never change a report; progress bars; output files: ``simulate --out`` adds ``series.csv`` and
``series.png``). ``semsched --version`` also says whether the compiled core runs (:mod:`semsched.compiled`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.markup import escape

from semsched.cli import (
    advise,
    bench,
    demo,
    fidelity,
    gateway,
    length,
    lengths,
    listing,
    profile,
    reproduce,
    simulate,
    sweep,
    urgency,
)
from semsched.compiled import status as compiled_status
from semsched.core.errors import SemschedError

COMMANDS = (simulate, sweep, demo, reproduce, advise, profile, fidelity, gateway, listing, urgency, length,
            lengths, bench)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # wide enough for the comparison table when output is piped to a file
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        handler: Callable[[argparse.Namespace, Console], int] = args.handler
        return handler(args, console)
    except SemschedError as error:
        # one line, whatever the terminal's width; the message is text, never markup
        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="semsched", description="Which LLM request runs next: simulate and compare scheduling policies."
    )
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def version_line() -> str:
    """``semsched 0.1.0, compiled core (mypyc): yes``: the version, and whether the core runs compiled (and if
    not, why: :mod:`semsched.compiled`)."""
    try:
        version = importlib.metadata.version("semsched")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "(not installed)"
    return f"semsched {version}, {compiled_status().describe()}"


if __name__ == "__main__":
    raise SystemExit(main())
