"""A request's token emission record: the ranges of step indices (into its engine's ``TokenTimeline``) at which it
emitted tokens. Compiled with the core (:mod:`semsched.compiled`): the scheduler records every emitting request
after every step through :func:`record_tokens` (a speculative round through :func:`record_round`), native calls;
``Request.record_tokens`` and ``Request.record_round`` are these functions."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from semsched.core.request import Request, TokenTimeline


def record_tokens(request: Request, timeline: TokenTimeline, first_step: int, count: int) -> None:
    """Record that ``request`` emitted ``count`` tokens at the consecutive steps of ``timeline`` from
    ``first_step``: its last range of step indices (``[start, stop)``, in order) grows when they continue it, else
    a range is appended."""
    if request.timeline is None:
        request.timeline = timeline
    ranges = request.token_step_ranges
    if ranges:
        last = ranges[-1]
        if last[1] == first_step:
            last[1] = first_step + count
            return
    ranges.append([first_step, first_step + count])


def record_round(request: Request, timeline: TokenTimeline, step: int, count: int) -> None:
    """Record that ``request`` emitted ``count`` tokens together at ``step`` of ``timeline`` (a speculative
    round): the first as :func:`record_tokens` records one (it may grow the last range), the others as one entry
    of ``request.round_extras`` (they share the first's step, so the token times are those of ``count`` calls of
    ``record_tokens(request, timeline, step, 1)``)."""
    if count <= 0:
        return
    record_tokens(request, timeline, step, 1)
    if count > 1:
        ranges = request.token_step_ranges
        last = ranges[-1]
        request.round_extras.append([len(ranges) - 1, last[1] - last[0] - 1, count - 1])
