"""LP-SJF (seed 004's baseline): length-prediction-based shortest job first, non-preemptive.

Seed 004 cites Qiu et al. 2024 for it, the same method as :mod:`semsched.policies.ssjf`: shortest predicted output
first, from the request's predicted length distribution (its mean; ``point=median`` for the median), the true
length without a prediction. It ignores speculative acceptance, which is what seed 004 holds against it: two
requests of one predicted length may need very different numbers of rounds.
"""

from __future__ import annotations

from typing import ClassVar

from semsched.policies.registry import register_policy
from semsched.policies.ssjf import SSJF


@register_policy
class LPSJF(SSJF):
    """SSJF under seed 004's name: shortest predicted output first, non-preemptive, blind to acceptance.

    starvation: possible for requests predicted long while requests predicted shorter keep arriving.
    """

    name: ClassVar[str] = "lp-sjf"
