"""Smallest expected remaining cost first (seed 002 Fig. 11's "Mean" baseline), preemptive.

The index is ``E[C(L) - C(g) | L > g]``: the mean of the request's cost distribution still ahead of the cost
attained after ``g`` tokens, refreshed at bucket boundaries like ``gittins`` (same ``cost``, ``buckets``,
``bucket_tokens`` and ``refresh`` options; :mod:`semsched.policies.cost_index`), so that the two differ only in
the index. With ``cost=output`` it is ``srpt:length=predicted`` refreshed per bucket.
"""

from __future__ import annotations

from typing import ClassVar

from semsched.policies.cost_index import CostIndexPolicy
from semsched.policies.cost_model import CostDistribution
from semsched.policies.registry import register_policy


@register_policy
class Mean(CostIndexPolicy):
    """Smallest expected remaining cost first (SageSched Fig. 11's "Mean").

    starvation: possible for requests with a large expected remaining cost while requests with smaller ones keep
    arriving; a request that outlives its prediction gets the floor index, ahead of every request still within
    its own.
    """

    name: ClassVar[str] = "mean"

    def cost_index(self, costs: CostDistribution, attained: float) -> float | None:
        return costs.mean_remaining(attained)
