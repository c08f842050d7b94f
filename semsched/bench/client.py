"""One request against the server: sent, timed token by token, and always ended with an :class:`Outcome`.

Times are seconds on the run's clock (``clock()`` minus the run's start). Streaming: every server-sent event with
output text is one token, at the time it arrived (the usage's ``completion_tokens`` corrects the count where a
chunk held several tokens); non-streaming: every token at the time the answer arrived, so TTFT = E2E and TPOT/ITL
carry no information. Failures are outcomes, never exceptions: ``http 429: ...`` and ``http 503: ...`` (also an
SSE error event with either code, and semsched's ``abort`` before any token) are rejections; other HTTP errors,
``stream broken: ...`` (no ``[DONE]``, a cut connection, an SSE error event), ``timeout: ...`` and
``connection error: ...`` are errors.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from semsched.bench.options import BenchOptions
from semsched.bench.protocol import (
    REJECTION_STATUSES,
    body_error,
    completion_of,
    parse_event,
    request_body,
    request_headers,
    short,
)
from semsched.core.request import Request

Clock = Callable[[], float]


@dataclass
class Outcome:
    """What happened to one request. ``request`` is the workload's (its ``arrival_time_s`` the intended send
    time); ``chunk_times_s`` are the arrival times of chunks with text (non-streaming: of the answer);
    ``completion_tokens`` the usage's count when the server gave one. ``error`` is ``None`` for a success;
    ``rejected`` tells a refusal for load (429/503) from an error."""

    request: Request
    send_time_s: float
    chunk_times_s: list[float] = field(default_factory=list)
    finish_time_s: float | None = None
    completion_tokens: int | None = None
    status: int | None = None
    error: str | None = None
    rejected: bool = False

    def fail(self, reason: str, now_s: float, *, rejected: bool = False) -> Outcome:
        self.error, self.rejected, self.finish_time_s = reason, rejected, now_s
        return self


class _Failure(Exception):
    """Ends one request early with its reason (caught in :func:`send_request`)."""

    def __init__(self, reason: str, *, rejected: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.rejected = reason, rejected


async def send_request(
    client: httpx.AsyncClient, options: BenchOptions, model: str, request: Request, clock: Clock
) -> Outcome:
    """Send ``request`` now and follow it to its end, within ``options.timeout_s``."""
    outcome = Outcome(request, send_time_s=clock())
    body, headers = request_body(options, model, request), request_headers(options, request)
    try:
        async with asyncio.timeout(options.timeout_s):
            if options.stream:
                await _streamed(client, options.generation_url, body, headers, outcome, clock)
            else:
                await _whole(client, options.generation_url, body, headers, outcome, clock)
    except _Failure as failure:
        return outcome.fail(failure.reason, clock(), rejected=failure.rejected)
    except TimeoutError:
        return outcome.fail(f"timeout: no complete answer within {options.timeout_s:g} s", clock())
    except httpx.HTTPError as error:
        return outcome.fail(_transport_reason(error, outcome), clock())
    except Exception as error:  # noqa: BLE001 - every sent request must end in the report, even on a client bug
        return outcome.fail(f"client error: {type(error).__name__}: {short(str(error))}", clock())
    outcome.finish_time_s = clock()
    return outcome


def _transport_reason(error: httpx.HTTPError, outcome: Outcome) -> str:
    detail = short(str(error)) or type(error).__name__
    if outcome.status is None:
        return f"connection error: {detail}"
    return f"stream broken: {detail}"


async def _streamed(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    outcome: Outcome,
    clock: Clock,
) -> None:
    async with client.stream("POST", url, json=body, headers=headers) as response:
        outcome.status = response.status_code
        if response.status_code >= 400:
            _raise_http(response.status_code, body_error(await response.aread()))
        async for line in response.aiter_lines():
            event = parse_event(line)
            if event is None:
                continue
            if event.done:
                return
            if event.error is not None:
                _raise_event_error(event.error, event.error_code, outcome)
            if event.abort is not None:
                _raise_abort(event.abort, len(outcome.chunk_times_s))
            if event.has_text:
                outcome.chunk_times_s.append(clock())
            if event.completion_tokens is not None:
                outcome.completion_tokens = event.completion_tokens
    raise _Failure(f"stream broken: ended without [DONE] after {len(outcome.chunk_times_s)} chunks")


async def _whole(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    outcome: Outcome,
    clock: Clock,
) -> None:
    response = await client.post(url, json=body, headers=headers)
    outcome.status = response.status_code
    if response.status_code >= 400:
        _raise_http(response.status_code, body_error(response.content))
    try:
        payload = json.loads(response.content)
    except json.JSONDecodeError:
        raise _Failure(f"bad answer: not JSON: {short(response.text)[:80]!r}") from None
    tokens, abort = completion_of(payload)
    outcome.completion_tokens = tokens
    if abort is not None:
        _raise_abort(abort, tokens or 0)
    outcome.chunk_times_s.append(clock())


def _raise_http(status: int, message: str) -> None:
    raise _Failure(f"http {status}: {message}", rejected=status in REJECTION_STATUSES)


def _raise_event_error(message: str, code: int | None, outcome: Outcome) -> None:
    if code in REJECTION_STATUSES and not outcome.chunk_times_s:
        raise _Failure(f"http {code}: {message}", rejected=True)
    raise _Failure(f"stream broken: error event{f' {code}' if code else ''}: {message}")


def _raise_abort(reason: str, tokens_so_far: int) -> None:
    """An ``abort`` finish: semsched's adapter rejecting the request (before any token), else a drop."""
    if not tokens_so_far:
        raise _Failure(f"aborted: {short(reason)}", rejected=True)
    raise _Failure(f"stream broken: aborted after {tokens_so_far} tokens: {short(reason)}")


def default_clock(start: float) -> Clock:
    """Seconds since ``start`` on the monotonic performance counter."""
    return lambda: time.perf_counter() - start
