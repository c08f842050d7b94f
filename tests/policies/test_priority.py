"""priority: vLLM's strict priority (lower value first, then arrival); no displacement of running work."""

from __future__ import annotations

from tests.policies.factories import displaced_by, service_order
from tests.support import make_request


def test_serves_by_priority_then_arrival() -> None:
    requests = [
        make_request("blocker", arrival=0.0, priority=2, output=100),  # starts first: alone when it arrives
        make_request("low", arrival=0.1, priority=2),
        make_request("high-late", arrival=0.3, priority=0),
        make_request("high-early", arrival=0.2, priority=0),
        make_request("mid", arrival=0.15, priority=1),
    ]
    assert service_order("priority", requests) == ["blocker", "high-early", "high-late", "mid", "low"]


def test_like_vllm_it_never_displaces_running_work() -> None:
    running = [make_request("low", prompt=60, output=10, priority=3)]
    urgent = make_request("urgent", prompt=20, output=4, priority=0, arrival=1.0)
    assert displaced_by("priority", running, urgent, num_gpu_blocks=20) == []
