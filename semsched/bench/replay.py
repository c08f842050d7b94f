"""Open-loop replay: every workload request is sent at its arrival time (seconds after the start), whatever the
server has answered by then, over one shared ``httpx.AsyncClient``; the run ends when every request has ended."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from semsched.bench.client import Outcome, default_clock, send_request
from semsched.bench.options import BenchError, BenchOptions
from semsched.core.request import Request

#: ``progress(done, total)`` after each request ends
Progress = Callable[[int, int], None]
PROBE_TIMEOUT_S = 10.0
#: idle connections kept for reuse; connections in use are not limited (an open-loop client must not queue)
KEEPALIVE_CONNECTIONS = 256


@dataclass(frozen=True)
class ReplayResult:
    """Every request's :class:`Outcome` in workload order, the model asked for, and the run's wall time."""

    outcomes: list[Outcome]
    model: str
    wall_s: float


def run_replay(
    options: BenchOptions, requests: Sequence[Request], progress: Progress | None = None
) -> ReplayResult:
    """Check that the server answers, then replay ``requests`` open-loop (see the module docstring)."""
    return asyncio.run(_replay(options, requests, progress))


async def _replay(options: BenchOptions, requests: Sequence[Request], progress: Progress | None) -> ReplayResult:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=KEEPALIVE_CONNECTIONS)
    timeout = httpx.Timeout(options.timeout_s, connect=min(options.timeout_s, PROBE_TIMEOUT_S))
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        model = await probe_server(client, options)
        start = time.perf_counter()
        clock = default_clock(start)
        done = 0

        def finished(_: asyncio.Task[Outcome]) -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, len(requests))

        tasks = []
        for request in requests:
            delay_s = request.arrival_time_s - clock()
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            task = asyncio.create_task(send_request(client, options, model, request, clock))
            task.add_done_callback(finished)
            tasks.append(task)
        outcomes = list(await asyncio.gather(*tasks))
        return ReplayResult(outcomes, model, time.perf_counter() - start)


async def probe_server(client: httpx.AsyncClient, options: BenchOptions) -> str:
    """The model to ask for (``options.model``, else the first the server lists), after checking that
    ``/v1/models`` answers: a :class:`BenchError` naming ``--url`` (or ``--api-key``, or ``--model``) if not."""
    url = options.url + "/v1/models"
    try:
        response = await client.get(url, headers=options.base_headers(), timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as error:
        raise BenchError(f"--url: cannot reach {url}: {str(error) or type(error).__name__}") from None
    if response.status_code in (401, 403):
        raise BenchError(f"--api-key: {url} answered http {response.status_code} (give the server's key)")
    if options.model is not None:
        return options.model
    model = _first_model(response)
    if model is None:
        raise BenchError(f"--model: give it; {url} answered http {response.status_code} without a model list")
    return model


def _first_model(response: httpx.Response) -> str | None:
    if response.status_code != 200:
        return None
    try:
        data = response.json().get("data")
        model = data[0]["id"]
    except (ValueError, AttributeError, LookupError, TypeError):
        return None
    return model if isinstance(model, str) and model else None
