"""A test-only policy for the server tests of rejections, loaded into vLLM's processes the way a user's own policy
is: ``SEMSCHED_POLICY_MODULES=tests.vllm.reject_policy`` (imported by semsched's config check before the spec is
resolved). Nothing in the pytest process imports it, so the registry there never lists it.

``test-reject-tier``: ``priority-preempt`` that does not admit requests of tier ``REJECT``.
"""

from __future__ import annotations

from typing import ClassVar

from semsched.core.plan import Admission
from semsched.core.policy import SchedulerView
from semsched.core.request import Request
from semsched.policies import POLICIES, register_policy
from semsched.policies.priority_preempt import PriorityPreempt


class RejectTier(PriorityPreempt):
    """``priority-preempt`` that does not admit requests of tier ``REJECT``."""

    name: ClassVar[str] = "test-reject-tier"

    def admit(self, request: Request, view: SchedulerView, now_s: float) -> Admission:
        if request.tier.upper() == "REJECT":
            return Admission.reject("tier REJECT is refused")
        return Admission.accept()


if RejectTier.name not in POLICIES.names():
    register_policy(RejectTier)
