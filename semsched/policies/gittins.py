"""SageSched's uncertainty-aware scheduling (seed 002 §3.3): smallest Gittins index of the remaining cost first.

The Gittins index of a request whose cost ``X`` follows a discrete distribution with support
``x_1 < ... < x_k``, after it has attained cost ``a``, is the least expected cost per completion over the
budgets worth trying, the support points ahead of it:

    G(a) = min over x_j > a of  E[min(X - a, x_j - a) | X > a] / P(X <= x_j | X > a)

With ``p_i`` the probabilities of the points ahead, ``P_j = sum_{i<=j} p_i`` and ``M = P_m`` their total, the
numerator times ``M`` is ``sum_{i<=j} p_i (x_i - a) + (x_j - a)(M - P_j)``: the points reached before the budget
runs out cost their own size, every later one the whole budget (the second term is the one that is easy to drop).
``M`` cancels, so one pass of prefix sums gives every ratio (:func:`gittins_index`). For a point distribution
the index is the remaining cost, so ``gittins`` is SRPT on cost when lengths are known.

Refreshing at bucket boundaries, the cost models and what happens when a request outlives its prediction are
:mod:`semsched.policies.cost_index`'s; ``refresh=false`` is Fig. 11's "Gittins" baseline.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from semsched.policies.cost_index import CostIndexPolicy
from semsched.policies.cost_model import CostDistribution
from semsched.policies.registry import register_policy


def gittins_index(costs: CostDistribution, attained: float) -> float | None:
    """``G(attained)`` of ``costs`` (module doc) in O(k); None when no support point exceeds ``attained``."""
    certain, remaining = costs.certain_remaining(attained)
    if certain:
        return remaining
    ahead, probs = costs.tail(attained)
    if ahead.size == 0:
        return None
    done = np.cumsum(probs)  # P(a < X <= x_j), up to the common factor 1 / P(X > a)
    spent = np.cumsum(probs * ahead)  # E[X - a; a < X <= x_j]
    ratios = (spent + ahead * (done[-1] - done)) / done
    return float(ratios.min())


@register_policy
class Gittins(CostIndexPolicy):
    """Smallest Gittins index of the remaining cost first (SageSched).

    starvation: possible for requests with a large index (a long or uncertain remaining cost) while requests with
    smaller ones keep arriving; a request that outlives its prediction gets the floor index, ahead of every
    request still within its own.
    """

    name: ClassVar[str] = "gittins"

    def cost_index(self, costs: CostDistribution, attained: float) -> float | None:
        return gittins_index(costs, attained)
