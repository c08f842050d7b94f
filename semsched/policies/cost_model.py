"""Service cost of a request (seed 002, SageSched §3.2) and its distribution under a predicted output length.

A request with prompt length ``I`` that generates ``O`` tokens costs

* ``resource`` (default): ``C = O²/2 + I·O``, the KV memory-time (or attention compute) it holds summed over its
  decode steps, ``sum_{l=I}^{I+O} l`` up to the unit; the paper's unified model for memory- and compute-bound
  engines;
* ``output``: ``C = O``, the output length the other predictors schedule by (SSJF, LTR, TRAIL);
* ``weighted``: ``C = I + 2·O``, input plus doubly weighted output (§4.3.2, after Sheng et al.).

Every model is strictly increasing in ``O`` and its marginal cost ``C(O+1) - C(O)`` never falls, so a length
distribution maps support point by support point onto a cost distribution with the same probabilities, and the
attained cost after ``g`` generated tokens is ``C(g)``. :func:`predicted_lengths` is the distribution a policy
believes: the prediction, or the true length as a point when none is attached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from semsched.core.request import LengthDistribution, Request
from semsched.policies.passes import output_for_spent, request_cost

__all__ = ["output_for_spent", "request_cost"]  # (compiled in semsched.policies.passes; defined there)

CostModel = Literal["resource", "output", "weighted"]


def request_costs(output_tokens: np.ndarray, prompt_tokens: int, model: CostModel) -> np.ndarray:
    """:func:`request_cost` of each length, bit for bit the same numbers (attained costs are compared with
    them)."""
    return np.fromiter(
        (request_cost(float(o), prompt_tokens, model) for o in output_tokens), np.float64, output_tokens.size
    )


def attained_cost(request: Request, model: CostModel) -> float:
    """The cost a request has received so far: ``C(g)`` after ``g`` generated tokens."""
    return request_cost(float(request.num_output_tokens), request.prompt_tokens, model)


def one_token_floor(prompt_tokens: int, model: CostModel) -> float:
    """``C(1) - C(0)``: the cheapest one more token can be (marginal costs never fall). The index of a request
    that outlived every predicted length: a lower bound of every cost-to-go, so it keeps running."""
    return request_cost(1.0, prompt_tokens, model) - request_cost(0.0, prompt_tokens, model)


def predicted_lengths(request: Request) -> LengthDistribution:
    """The output-length distribution a policy believes: the prediction, else the true length as a point."""
    if request.predicted_output is not None:
        return request.predicted_output
    return LengthDistribution.point(request.target_output_tokens)


@dataclass(frozen=True, eq=False)
class CostDistribution:
    """A discrete cost distribution: ``costs`` strictly ascending, ``probs`` all positive (summing to 1).

    ``last_length`` is the largest output length behind it: past it the distribution has nothing left."""

    costs: np.ndarray
    probs: np.ndarray
    last_length: int

    @classmethod
    def of(cls, lengths: LengthDistribution, prompt_tokens: int, model: CostModel) -> CostDistribution:
        """The costs of ``lengths``' support points (zero-probability points dropped: they change no
        expectation and would divide by zero in a conditional one)."""
        outputs = np.asarray(lengths.lengths, dtype=np.float64)
        probs = np.asarray(lengths.probs, dtype=np.float64)
        keep = probs > 0
        outputs, probs = outputs[keep], probs[keep]
        return cls(request_costs(outputs, prompt_tokens, model), probs, int(outputs[-1]))

    @property
    def is_point(self) -> bool:
        return self.costs.size == 1

    def certain_remaining(self, attained: float) -> tuple[bool, float | None]:
        """For a single point of probability exactly 1 (a known length): ``(True, X - a)``, or ``(True, None)``
        once ``a`` reached it; ``(False, None)`` for every other distribution. Every index of such a point is its
        remaining cost, and this is the same float the array arithmetic gives (``d * 1.0 / 1.0``, ``d + 0.0``)
        without it: the common case (no prediction attached) on the policies' hot path."""
        if self.costs.size != 1 or self.probs[0] != 1.0:
            return False, None
        cost = float(self.costs[0])
        return True, (cost - attained if cost > attained else None)

    def tail(self, attained: float) -> tuple[np.ndarray, np.ndarray]:
        """Costs still ahead of ``attained`` (as ``X - a``) and their probabilities (not renormalised)."""
        start = int(np.searchsorted(self.costs, attained, side="right"))
        return self.costs[start:] - attained, self.probs[start:]

    def mean_remaining(self, attained: float) -> float | None:
        """``E[X - a | X > a]``; None when no support point exceeds ``a``."""
        certain, remaining = self.certain_remaining(attained)
        if certain:
            return remaining
        ahead, probs = self.tail(attained)
        if ahead.size == 0:
            return None
        return float(np.dot(ahead, probs) / probs.sum())


def cost_distribution(request: Request, model: CostModel) -> CostDistribution:
    """The cost distribution of ``request`` under ``model`` (from :func:`predicted_lengths`)."""
    return CostDistribution.of(predicted_lengths(request), request.prompt_tokens, model)
