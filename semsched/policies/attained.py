"""Attained service and speculative rounds, as a policy sees them (seed 004: ``laps-sd``, ``las``).

A request's *attained service* is the engine time of the steps it took part in: speculation and verification of
each of its rounds, its prefill, and the swap traffic of its step (so a switch is charged to the service of the
request that pays for it). The schedulers keep it, for a policy that sets ``charges_service``: every request that
emitted tokens in a step is charged the step's duration (``Request.service_s``; the core in compiled code, the
vLLM adapter from its step timing), with no per-token hook. A request that computed a prompt chunk without
emitting (chunked prefill) is charged with its first token only for the step that emitted it: with whole-prompt
prefills, as in the paper's setting, nothing is left out. A step in which nothing emitted at all (a prompt chunk
alone) is charged to the emitters of the next step.

Each emission after the first is one speculative round (a decode step; a fast-forwarded stretch of ``k`` steps is
``k`` rounds): ``Request.service_rounds`` counts them, ``round_service_s`` sums their seconds and
``round_tokens`` what they yielded, so a policy reads a request's mean tokens per round, ``n·A + 1`` in the
paper's notation, without knowing anything of the drafter.
"""

from __future__ import annotations

from typing import ClassVar

from semsched.core.policy import Policy
from semsched.core.request import Request


def attained_s(request: Request) -> float:
    """Engine seconds ``request`` has been served so far (the scheduler's ``Request.service_s``)."""
    return request.service_s


def rounds(request: Request) -> int:
    """Speculative rounds (decode steps) ``request`` has run."""
    return request.service_rounds


def mean_round_s(request: Request) -> float | None:
    """Mean engine time of ``request``'s rounds; None before its first."""
    count = request.service_rounds
    return request.round_service_s / count if count else None


class ServicePolicy(Policy):
    """Base of the policies that rank by attained service and read rounds (``laps-sd``): the schedulers charge
    both (``charges_service``)."""

    charges_service: ClassVar[bool] = True
