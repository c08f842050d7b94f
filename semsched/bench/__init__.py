"""``semsched bench``: replay a semsched workload open-loop against an OpenAI-compatible server (vLLM, with or
without semsched's scheduler, or semsched's gateway) and report it with the simulator's metrics.

Modules: :mod:`.options` (what to talk to and how; :class:`BenchError`), :mod:`.protocol` (request bodies,
synthetic prompts, parsing answers and server-sent events), :mod:`.client` (one request, timed, always ending
in an :class:`Outcome`), :mod:`.replay` (the open-loop run), :mod:`.report` (outcomes as terminal
:class:`~semsched.core.request.Request` objects, :func:`~semsched.metrics.summarize`, tables and files).
"""

from semsched.bench.client import Outcome, send_request
from semsched.bench.options import BenchError, BenchOptions, parse_header
from semsched.bench.protocol import request_body, synthetic_prompt
from semsched.bench.replay import ReplayResult, run_replay
from semsched.bench.report import BenchReport, build_report, print_report, report_json, write_report

__all__ = [
    "BenchError",
    "BenchOptions",
    "BenchReport",
    "Outcome",
    "ReplayResult",
    "build_report",
    "parse_header",
    "print_report",
    "report_json",
    "request_body",
    "run_replay",
    "send_request",
    "synthetic_prompt",
    "write_report",
]
