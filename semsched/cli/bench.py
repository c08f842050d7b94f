"""``semsched bench``: replay a workload open-loop against an OpenAI-compatible server and report it per class.

Every option is checked before the first request is sent; the server must answer ``/v1/models`` first.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from semsched.bench import BenchError, BenchOptions, build_report, parse_header, print_report, run_replay
from semsched.bench.options import DEFAULT_TIMEOUT_S, ENDPOINTS, TIER_FIELDS
from semsched.bench.report import report_json, write_report
from semsched.cli.common import check_seed, command_line, out_path, prepared_out_dir, progress_bars
from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.core.tiers import TierError
from semsched.policies.tier_table import load_tier_table
from semsched.workloads import build_workload


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "bench", help="replay a workload open-loop against an OpenAI-compatible server (vLLM, the gateway)"
    )
    parser.add_argument(
        "--url", required=True, help="server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is dropped)"
    )
    parser.add_argument(
        "--workload",
        default="azure-conv",
        help="workload spec (see `semsched workloads`); "
        "prompts are the workload's texts, else synthetic text of about the prompt's length",
    )
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration", type=float, required=True, help="seconds of arrivals")
    parser.add_argument("--model", default=None, help="model name (default: the first the server lists)")
    parser.add_argument(
        "--endpoint",
        choices=ENDPOINTS,
        default="completions",
        help="/v1/completions or /v1/chat/completions (default completions)",
    )
    parser.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="stream tokens (default; without it TTFT = E2E and TPOT/ITL say nothing)",
    )
    parser.add_argument(
        "--tier-fields",
        choices=TIER_FIELDS,
        default="all",
        help="all: priority + vllm_xargs (tier, SLOs); xargs: vllm_xargs only (plain vLLM's FCFS "
        "refuses a nonzero priority); none: neither, nor the x-semsched-tier header",
    )
    parser.add_argument("--tiers", type=Path, default=None, help="YAML tier table the workload draws tiers from")
    parser.add_argument("--api-key", default=None, help="sent as Authorization: Bearer KEY")
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="extra HTTP header on every request (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"limit on each whole request, seconds (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--max-requests", type=int, default=None, help="send at most this many requests (the workload's first N)"
    )
    parser.add_argument("--out", type=out_path, default=None, help="write bench.json and requests.csv here")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    options = bench_options(args)
    check_seed(args.seed)
    requests = bench_requests(args)
    if args.out is not None:
        prepared_out_dir(args.out)
    # with --json, stdout carries only the JSON document
    shown = Console(stderr=True) if args.json else console
    with progress_bars(shown) as bars:
        result = run_replay(options, requests, progress=bars.start("requests", len(requests)))
    report = build_report(result)
    meta = bench_meta(args, options, len(requests))
    if args.json:
        sys.stdout.write(report_json(report, meta) + "\n")
    else:
        shown.print(
            f"[dim]{args.workload}: {len(requests)} requests at {args.rate:g}/s to {options.url} "
            f"({result.model})[/]"
        )
        print_report(shown, report)
    if args.out is not None:
        write_report(args.out, report, meta)
        shown.print(f"report: {args.out / 'bench.json'} (and requests.csv)")
    return 0


def bench_options(args: argparse.Namespace) -> BenchOptions:
    headers = tuple(parse_header(text) for text in args.header)
    return BenchOptions(
        url=args.url,
        model=args.model,
        endpoint=args.endpoint,
        stream=args.stream,
        tier_fields=args.tier_fields,
        api_key=args.api_key,
        headers=headers,
        timeout_s=args.timeout_s,
    )


def bench_requests(args: argparse.Namespace) -> list[Request]:
    """The workload's requests, at most ``--max-requests`` of them; each bad option named."""
    if not (math.isfinite(args.rate) and args.rate > 0):
        raise BenchError(f"--rate: must be a finite number > 0 (got {args.rate:g})")
    if not (math.isfinite(args.duration) and args.duration > 0):
        raise BenchError(f"--duration: must be a finite number > 0 (got {args.duration:g})")
    if args.max_requests is not None and args.max_requests < 1:
        raise BenchError(f"--max-requests: must be >= 1 (got {args.max_requests})")
    extra: dict[str, Any] = {}
    if args.tiers is not None:
        try:
            extra["tiers"] = load_tier_table(args.tiers)
        except TierError as error:
            raise BenchError(f"--tiers: {error}") from None
    try:
        workload = build_workload(
            args.workload,
            rate_per_s=args.rate,
            duration_s=args.duration,
            seed=args.seed,
            num_requests=args.max_requests,
            **extra,
        )
    except SemschedError as error:
        raise BenchError(f"--workload: {error}") from None
    if args.max_requests is not None:
        workload = workload.head(args.max_requests)
    if not len(workload):
        raise BenchError(
            f"--duration: {args.workload!r} gives no request in {args.duration:g} s at "
            f"{args.rate:g}/s; raise the duration or the rate"
        )
    return workload.to_requests()


def bench_meta(args: argparse.Namespace, options: BenchOptions, num_requests: int) -> dict[str, Any]:
    return {
        "command": command_line(),
        "url": options.url,
        "endpoint": options.endpoint,
        "stream": options.stream,
        "tier_fields": options.tier_fields,
        "workload": args.workload,
        "num_requests": num_requests,
        "rate_per_s": args.rate,
        "duration_s": args.duration,
        "seed": args.seed,
        "timeout_s": options.timeout_s,
    }
