"""Typed messages between the scheduler and whatever executes its plans (simulator, engine adapter).

``BatchPlan`` goes out of :meth:`semsched.core.scheduler.Scheduler.schedule`; a ``StepResult`` comes back into
:meth:`~semsched.core.scheduler.Scheduler.update`. Both are plain data.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from semsched.core.request import Request


class PreemptionMode(enum.Enum):
    """How a preempted request gives back its KV blocks."""

    RECOMPUTE = "recompute"  # blocks freed; computed tokens reset and recomputed later in one prefill pass
    SWAP = "swap"  # blocks copied to CPU swap space (costs transfer time); restored before running again
    DROP = "drop"  # the request ends (state DROPPED, its reason given) instead of being preempted again


class PreemptionReason(enum.Enum):
    KV_PRESSURE = "kv_pressure"  # a running request needed a block and none was free
    PRIORITY = "priority"  # a waiting request displaced it (policy's may_preempt hook)


@dataclass(slots=True, init=False)
class ScheduledChunk:
    """``num_tokens`` tokens of ``request`` are computed this step on top of ``context_tokens`` cached ones: a
    (chunked) prefill, or the recompute of a preempted request. Decodes are listed as plain requests.

    In the notation of PROSERVE eq. 5-6: ``lq = num_tokens``, ``lkv = context_tokens``.
    """

    request: Request
    num_tokens: int
    context_tokens: int

    def __init__(self, request: Request, num_tokens: int, context_tokens: int) -> None:
        # (written out: the one dataclasses generates is interpreted; see BatchPlan)
        self.request = request
        self.num_tokens = num_tokens
        self.context_tokens = context_tokens


@dataclass(slots=True, init=False)
class Preemption:
    """One preemption of a plan (a value: nothing changes it once built)."""

    request: Request
    mode: PreemptionMode
    reason: PreemptionReason
    num_tokens_saved: int  # tokens of KV moved to swap (0 for recompute)

    def __init__(self, request: Request, mode: PreemptionMode, reason: PreemptionReason,
                 num_tokens_saved: int) -> None:
        # (written out: the one dataclasses generates is interpreted; see BatchPlan)
        self.request = request
        self.mode = mode
        self.reason = reason
        self.num_tokens_saved = num_tokens_saved


@dataclass(slots=True, init=False)
class BatchPlan:
    """What runs in one engine step.

    ``prefill`` holds the chunks of requests computing more than one token or still in their prompt;
    ``decode`` holds the requests that decode one token on top of their ``num_computed_tokens`` (a plain list:
    it is the bulk of every step, and a decode's chunk would say nothing its request does not);
    ``decode_context_tokens`` is the sum of their context lengths. ``swapped_in`` lists requests whose KV is copied
    back from swap before the step (``swap_in_tokens`` in total); ``preempted`` lists requests taken off the
    GPU while forming this plan (``swap_out_tokens`` copied out).
    """

    time_s: float
    prefill: list[ScheduledChunk] = field(default_factory=list)
    decode: list[Request] = field(default_factory=list)
    preempted: list[Preemption] = field(default_factory=list)
    swapped_in: list[Request] = field(default_factory=list)
    swap_in_tokens: int = 0
    swap_out_tokens: int = 0
    decode_context_tokens: int = 0  # sum of num_computed_tokens over decode requests at planning time

    def __init__(
        self,
        time_s: float,
        prefill: list[ScheduledChunk] | None = None,
        decode: list[Request] | None = None,
        preempted: list[Preemption] | None = None,
        swapped_in: list[Request] | None = None,
        swap_in_tokens: int = 0,
        swap_out_tokens: int = 0,
        decode_context_tokens: int = 0,
    ) -> None:
        # (written out: the one dataclasses generates is interpreted, and the scheduler makes a plan every step)
        self.time_s = time_s
        self.prefill = [] if prefill is None else prefill
        self.decode = [] if decode is None else decode
        self.preempted = [] if preempted is None else preempted
        self.swapped_in = [] if swapped_in is None else swapped_in
        self.swap_in_tokens = swap_in_tokens
        self.swap_out_tokens = swap_out_tokens
        self.decode_context_tokens = decode_context_tokens

    @property
    def num_tokens(self) -> int:
        return len(self.decode) + sum(c.num_tokens for c in self.prefill)

    @property
    def num_seqs(self) -> int:
        return len(self.prefill) + len(self.decode)

    def requests(self) -> list[Request]:
        """Every request that computes tokens in this step."""
        return [c.request for c in self.prefill] + self.decode

    @property
    def is_empty(self) -> bool:
        return not self.prefill and not self.decode

    @property
    def is_pure_decode(self) -> bool:
        return not self.prefill and not self.preempted and not self.swapped_in and bool(self.decode)


@dataclass(slots=True, init=False)
class StepResult:
    """What the executor reports after running a plan: when the step ended, requests it aborted, and, with
    speculative decoding, how many tokens each decode request emitted (1 to 1 + ``num_lookahead_tokens``;
    requests not listed emitted one)."""

    end_time_s: float
    aborted_request_ids: tuple[str, ...] = ()
    accepted_tokens: Mapping[str, int] = field(default_factory=dict)

    def __init__(
        self,
        end_time_s: float,
        aborted_request_ids: tuple[str, ...] = (),
        accepted_tokens: Mapping[str, int] | None = None,
    ) -> None:
        # (written out: the one dataclasses generates is interpreted, and the executor reports every step)
        self.end_time_s = end_time_s
        self.aborted_request_ids = aborted_request_ids
        self.accepted_tokens = {} if accepted_tokens is None else accepted_tokens


@dataclass(frozen=True, slots=True)
class Admission:
    """A policy's answer to an arriving request."""

    accepted: bool
    reason: str = ""

    @classmethod
    def accept(cls) -> Admission:
        return _ACCEPT

    @classmethod
    def reject(cls, reason: str) -> Admission:
        return cls(False, reason)


_ACCEPT = Admission(True)
