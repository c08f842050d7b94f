"""Attained service and speculative rounds, as a policy sees them (seed 004: ``laps-sd``, ``las``).

A request's *attained service* is the engine time of the steps it took part in: speculation and verification of
each of its rounds, its prefill, and the swap traffic of its step (so a switch is charged to the service of the
request that pays for it). The scheduler keeps it (``Request.service_s``, for a policy that sets
``charges_service``): every request that emitted tokens in a step is charged the step's duration, in compiled
code, with no per-token hook. A request that computed a prompt chunk without emitting (chunked prefill) is charged
with its first token only for the step that emitted it: with whole-prompt prefills, as in the paper's setting,
nothing is left out. A step in which nothing emitted at all (a prompt chunk alone) is charged to the emitters of
the next step, as :class:`ServiceMeter` groups it.

The rounds are the policy's: the scheduler tells it each step's duration (``on_step``) before the step's tokens
(``on_tokens``), and :class:`ServiceMeter` adds the duration of a decode step to the round time of every request
that emitted in it.

Each emission after the first is one speculative round (a decode step); ``rounds`` counts them and ``round
tokens`` sums what they yielded, so a policy reads a request's mean tokens per round, ``n·A + 1`` in the paper's
notation, without knowing anything of the drafter. (``las`` reads only the attained service, and keeps no rounds.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from semsched.core.policy import Policy, PolicyConfig
from semsched.core.request import Request

ROUNDS = "service.rounds"
ROUND_TOKENS = "service.round_tokens"
ROUND_TIME = "service.round_s"  # engine time of the rounds (not the prefill)
_NO_STEP = (0.0,)  # what tokens reported at another time than the last step's end are charged


def attained_s(request: Request) -> float:
    """Engine seconds ``request`` has been served so far (the scheduler's ``Request.service_s``)."""
    return request.service_s


def rounds(request: Request) -> int:
    """Speculative rounds (decode steps) ``request`` has run."""
    return int(request.policy_state.get(ROUNDS, 0))


def mean_round_s(request: Request) -> float | None:
    """Mean engine time of ``request``'s rounds; None before its first."""
    count = rounds(request)
    return request.policy_state[ROUND_TIME] / count if count else None


class ServiceMeter:
    """Counts the rounds of the requests of each step and charges their durations to the round time (see the
    module docstring; the attained service itself is the scheduler's).

    The steps reported together before their tokens form one group: one step normally, ``k`` identical decode
    steps when the simulator fast-forwards a stretch (it reports the ``k`` steps, then each request's ``k``
    tokens at once); a request of the group is charged the group's whole duration and ``k`` rounds."""

    __slots__ = ("_durations", "end_s", "closed", "single_s")

    def __init__(self) -> None:
        self._durations: list[float] = []
        #: when the last step ended (tokens reported at another time are charged nothing)
        self.end_s = float("nan")
        #: tokens were reported since the last step: the next step starts a new group
        self.closed = True
        #: the group's duration while it is one step (the hot path's charge), else None
        self.single_s: float | None = None

    def step(self, duration_s: float, end_s: float) -> None:
        """A step of ``duration_s`` ended at ``end_s`` (the policy's ``on_step``). Kept as Python floats (a
        fast-forwarded stretch reports NumPy's): the same values and the same additions, at a float's cost, and so
        is the round time they add up to."""
        duration_s, end_s = float(duration_s), float(end_s)
        if self.closed:
            self._durations, self.closed, self.single_s = [duration_s], False, duration_s
        else:
            self._durations.append(duration_s)
            self.single_s = None
        self.end_s = end_s

    def tokens(self, request: Request, num_tokens: int, now_s: float) -> int:
        """``request`` emitted ``num_tokens`` at ``now_s`` (the policy's ``on_tokens``): count its rounds and
        charge their time, one step at a time (so a fast-forwarded stretch adds up bit for bit as its steps would).
        Returns how many rounds (decode steps) the emission was: 0 for the prompt's first token."""
        self.closed = True
        state = request.policy_state
        durations = self._durations if now_s == self.end_s else _NO_STEP
        if len(durations) == 1:  # (one step, the hot path: the same additions as the loops below)
            duration = durations[0]
            if request.num_output_tokens == num_tokens:
                return 0
            state[ROUND_TIME] = state.get(ROUND_TIME, 0.0) + duration
            state[ROUNDS] = state.get(ROUNDS, 0) + 1
            state[ROUND_TOKENS] = state.get(ROUND_TOKENS, 0) + num_tokens
            return 1
        if request.num_output_tokens == num_tokens:  # the prompt's prefill emitted the first token
            return 0
        spent = state.get(ROUND_TIME, 0.0)
        for duration in durations:
            spent += duration
        state[ROUND_TIME] = spent
        state[ROUNDS] = state.get(ROUNDS, 0) + len(durations)
        state[ROUND_TOKENS] = state.get(ROUND_TOKENS, 0) + num_tokens
        return len(durations)


class ServicePolicy(Policy):
    """Base of the policies that rank by service and count rounds (``laps-sd``): the scheduler charges the
    service (``charges_service``); a :class:`ServiceMeter` fed by ``on_step`` counts the rounds, and a subclass's
    ``on_tokens`` calls ``self.meter.tokens``. (``las`` reads only the service: it needs neither.)"""

    charges_service: ClassVar[bool] = True

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self.meter = ServiceMeter()

    def on_step(
        self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int,
        duration_s: float, now_s: float,
    ) -> None:
        self.meter.step(duration_s, now_s)
