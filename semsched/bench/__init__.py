"""``semsched bench``: replay a semsched workload open-loop against an OpenAI-compatible server (vLLM, with or
without semsched's scheduler, or semsched's gateway) and report it with the simulator's metrics.

Modules: :mod:`.options` (what to talk to and how; :class:`BenchError`), :mod:`.protocol` (request bodies,
synthetic prompts, parsing answers and server-sent events), :mod:`.client` (one request, timed, always ending
in an :class:`Outcome`), :mod:`.replay` (the open-loop run), :mod:`.report` (outcomes as terminal
:class:`~semsched.core.request.Request` objects, :func:`~semsched.metrics.summarize`, tables and files).

In more detail: one shared ``httpx.AsyncClient``; bodies ask for exactly the workload's output length
(``max_tokens`` = ``min_tokens``, ``ignore_eos``), with ``priority`` and ``vllm_xargs`` per ``--tier-fields`` and
the header ``x-semsched-tier``; the workload's prompt text, else synthetic text of about the prompt's length with
the request id first, so prefix caching cannot help. A request always ends in an ``Outcome``: 429/503 and
semsched's ``abort`` are rejections; other HTTP errors, broken streams, timeouts and connection errors are
errors, each with its reason. The server is probed on ``/v1/models``, then every request is sent at its arrival.
Outcomes become terminal ``Request``s with their own ``TokenTimeline``, so ``summarize`` and ``requests.csv`` are
the simulator's; ``bench.json`` is ``summary.json``'s layout plus the client's send lag and failures by reason.
The CLI builds the workload (:mod:`semsched.cli.bench`); test support: ``tests/fake_openai.py``.
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
