"""priority-preempt: strict priority, and a waiting request displaces strictly lower-priority running work."""

from __future__ import annotations

import pytest

from semsched.core.plan import PreemptionMode
from semsched.policies import make_policy
from tests.policies.factories import displaced_by
from tests.support import make_request


def test_displaces_lower_priority_work_that_blocks_it() -> None:
    running = [make_request("low", prompt=60, output=10, priority=3)]
    urgent = make_request("urgent", prompt=20, output=4, priority=0, arrival=1.0)
    assert displaced_by("priority-preempt", running, urgent, num_gpu_blocks=20) == ["low"]


def test_never_displaces_equal_or_more_important_work() -> None:
    running = [make_request("peer", prompt=60, output=10, priority=0)]
    same = make_request("same", prompt=20, output=4, priority=0, arrival=1.0)
    assert displaced_by("priority-preempt", running, same, num_gpu_blocks=20) == []


def test_victims_are_worst_priority_then_least_progress() -> None:
    policy = make_policy("priority-preempt")
    candidate = make_request("c", priority=1)
    a = make_request("a", priority=2)
    b = make_request("b", priority=3)
    c = make_request("c2", priority=3)
    b.num_computed_tokens, c.num_computed_tokens = 50, 10
    peer = make_request("peer", priority=1)
    victims = policy.victims_for(candidate, [a, b, c, peer], view=None, now_s=0.0)  # type: ignore[arg-type]
    assert [v.request_id for v in victims] == ["c2", "b", "a"]


@pytest.mark.parametrize(
    ("spec", "mode"), [("priority-preempt", "recompute"), ("priority-preempt:mode=swap", "swap")]
)
def test_preemption_mode_follows_the_parameter(spec: str, mode: str) -> None:
    policy = make_policy(spec)
    assert policy.preemption_mode(make_request(), view=None) is PreemptionMode(mode)  # type: ignore[arg-type]


def test_exclusive_batches_one_class() -> None:
    assert make_policy("priority-preempt:exclusive=true").exclusive_class(make_request(priority=2)) == 2
    assert make_policy("priority-preempt").exclusive_class(make_request(priority=2)) is None
