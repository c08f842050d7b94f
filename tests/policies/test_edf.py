"""edf: earliest TTFT or E2E deadline first; requests without the SLO after those with one."""

from __future__ import annotations

from semsched.core.request import Request
from tests.policies.factories import displaced_by, service_order
from tests.support import make_request


def test_serves_the_earliest_deadline_first_and_no_slo_last() -> None:
    requests = [
        make_request("blocker", arrival=0.0, output=100, ttft_slo_s=1.0),
        make_request("no-slo", arrival=0.1),
        make_request("loose", arrival=0.2, ttft_slo_s=10.0),
        make_request("tight", arrival=0.3, ttft_slo_s=0.5),
    ]
    assert service_order("edf", requests) == ["blocker", "tight", "loose", "no-slo"]


def test_e2e_deadline_variant() -> None:
    def requests() -> list[Request]:
        return [
            make_request("blocker", arrival=0.0, output=100, e2e_slo_s=1.0, ttft_slo_s=0.1),
            make_request("late-deadline", arrival=0.1, e2e_slo_s=20.0, ttft_slo_s=0.1),
            make_request("early-deadline", arrival=0.2, e2e_slo_s=5.0, ttft_slo_s=9.0),
        ]

    assert service_order("edf:deadline=e2e", requests()) == ["blocker", "early-deadline", "late-deadline"]
    assert service_order("edf:deadline=ttft", requests()) == ["blocker", "late-deadline", "early-deadline"]


def test_displaces_later_deadlines_only_with_preempt() -> None:
    def scenario() -> tuple[list, object]:  # type: ignore[type-arg]
        running = [make_request("relaxed", prompt=60, output=10, ttft_slo_s=30.0)]
        return running, make_request("urgent", prompt=20, output=4, ttft_slo_s=0.2, arrival=1.0)

    assert displaced_by("edf", *scenario(), num_gpu_blocks=20) == []  # type: ignore[arg-type]
    assert displaced_by("edf:preempt=true", *scenario(), num_gpu_blocks=20) == ["relaxed"]  # type: ignore[arg-type]
