"""A request's token emission record: the ranges of step indices (into its engine's ``TokenTimeline``) at which it
emitted tokens. Compiled with the core (:mod:`semsched.compiled`): the scheduler records every emitting request
after every step through :func:`record_steps`, a native call, and ``Request.record_tokens`` is built on it."""

from __future__ import annotations


def record_steps(ranges: list[list[int]], first_step: int, count: int) -> None:
    """Add the ``count`` consecutive steps from ``first_step`` to ``ranges`` (``[start, stop)`` step indices, in
    order): the last range grows when they continue it, else a range is appended."""
    if ranges:
        last = ranges[-1]
        if last[1] == first_step:
            last[1] = first_step + count
            return
    ranges.append([first_step, first_step + count])
