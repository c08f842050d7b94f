"""Shortest remaining processing time, preemptive, on oracle or predicted remaining output.

A waiting request displaces running requests whose remaining output is longer than its own. The true remaining
output only shrinks while a request runs, so with ``length=oracle`` decisions change only at arrivals, finishes
and preemptions (``stable_between_events``). A predicted remaining output, E[L - g | L > g] after ``g`` tokens,
can rise instead: once a request outlives the short mode of a bimodal prediction, its expected remaining jumps to
the long one's, and it may become a victim in the middle of a decode-only stretch. The policy is therefore stable
only while no unfinished request it has seen carries a prediction whose expected remaining can rise
(:func:`remaining_can_rise`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from semsched.core.policy import Policy, PolicyConfig, SchedulerView, SortKey
from semsched.core.request import LengthDistribution, Request
from semsched.policies.registry import register_policy
from semsched.policies.sjf import LengthConfig, expected_remaining

#: a jump of the expected remaining output closer to 0 than this (relative) counts as a rise: float noise in
#: :meth:`LengthDistribution.expected_remaining` could make a flat jump a tiny rise
_JUMP_TOLERANCE = 1e-9


def remaining_can_rise(prediction: LengthDistribution) -> bool:
    """Whether E[L - g | L > g] can grow from one generated token ``g`` to the next.

    Between support points it falls by exactly one per token; at a support point ``n`` the mass at ``n`` leaves
    the tail, so it jumps by ``mean(L | L > n) - mean(L | L >= n) - 1``. At the largest length it stays 1 (the
    method's fallback). A jump within float noise of 0 (a memoryless stretch, where it stays flat) counts as a
    rise, so the answer errs towards False stability, never towards a wrong fast-forward.
    """
    lengths = np.asarray(prediction.lengths, dtype=np.float64)
    probs = np.asarray(prediction.probs, dtype=np.float64)
    lengths, probs = lengths[probs > 0], probs[probs > 0]  # zero-probability lengths change no expectation
    if lengths.size < 2:
        return False
    mass = np.cumsum(probs[::-1])[::-1]  # P(L >= n_i)
    weighted = np.cumsum((lengths * probs)[::-1])[::-1]  # E[L; L >= n_i]
    mean_from = weighted / mass  # mean(L | L >= n_i)
    jumps = mean_from[1:] - mean_from[:-1] - 1.0  # at n_0 .. n_{k-2}; the last support point keeps 1
    return bool((jumps > -_JUMP_TOLERANCE * np.maximum(1.0, mean_from[1:])).any())


@register_policy
class SRPT(Policy):
    """Shortest remaining output first; a waiting request displaces running ones with more remaining.

    starvation: possible for long requests while shorter ones keep arriving, waiting or running (a running one
    is displaced by every arrival with less remaining output).
    """

    name: ClassVar[str] = "srpt"
    config_cls: ClassVar[type[PolicyConfig]] = LengthConfig
    config: LengthConfig

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        #: ids of unfinished requests whose predicted remaining output can rise (dropped ones stay: that only
        #: costs fast-forward, never exactness)
        self._rising: set[str] = set()

    @property
    def stable_between_events(self) -> bool:  # type: ignore[override]
        """True unless an unfinished request's predicted remaining output can rise (see the module doc)."""
        return not self._rising

    @property
    def uses_predicted_lengths(self) -> bool:
        return self.config.length == "predicted"

    def on_arrival(self, request: Request, now_s: float) -> None:
        prediction = request.predicted_output
        if self.config.length == "predicted" and prediction is not None and remaining_can_rise(prediction):
            self._rising.add(request.request_id)

    def on_finish(self, request: Request, now_s: float) -> None:
        self._rising.discard(request.request_id)

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (expected_remaining(request, self.config.length), request.arrival_time_s)

    def victim_key(self, request: Request) -> SortKey:
        return (expected_remaining(request, self.config.length), request.arrival_time_s)

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        mine = expected_remaining(candidate, self.config.length)
        longer = [r for r in running if expected_remaining(r, self.config.length) > mine]
        return sorted(longer, key=self.victim_key, reverse=True)
