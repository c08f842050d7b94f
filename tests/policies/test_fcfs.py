"""fcfs: arrival order, never displaces running work."""

from __future__ import annotations

from tests.policies.factories import displaced_by, service_order
from tests.support import make_request


def test_serves_in_arrival_order_whatever_the_priority_or_length() -> None:
    requests = [
        make_request("first", arrival=0.0, priority=3, output=50),
        make_request("second", arrival=0.1, priority=0, output=2),
        make_request("third", arrival=0.2, priority=1, output=1),
    ]
    assert service_order("fcfs", requests) == ["first", "second", "third"]


def test_a_waiting_request_never_displaces_running_work() -> None:
    running = [make_request("low", prompt=60, output=10, priority=3)]
    urgent = make_request("urgent", prompt=20, output=4, priority=0, arrival=1.0)
    assert displaced_by("fcfs", running, urgent, num_gpu_blocks=20) == []
