"""Attained service and rounds, as the scheduler keeps them (``Request.service_s``, ``service_rounds``,
``round_service_s``, ``round_tokens``): each step's duration charged to the requests that emitted in it, one
addition per step in the order of the steps, held bit for bit to what the hooks the scheduler calls add up to."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar

import pytest

from semsched.core.request import Request
from semsched.policies import POLICIES
from semsched.policies.las import LAS
from semsched.policies.registry import register_policy
from semsched.sim.runner import build_simulation
from tests.sim.test_stress import SCENARIOS, Scenario


class _ServiceReference(LAS):
    """``las`` that also keeps, beside the scheduler's accounting, the accounting of hooks alone: the steps
    reported by ``on_step`` since the last ``on_tokens`` form a group, charged to each request whose tokens are
    reported at the group's last end; an emission after the first is ``len(group)`` rounds."""

    name: ClassVar[str] = "test-service-reference"

    def __init__(self, config: object = None) -> None:
        super().__init__(None)
        self.group: list[float] = []
        self.closed = True
        self.end_s = float("nan")

    def on_step(
        self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int, duration_s: float,
        now_s: float,
    ) -> None:
        if self.closed:
            self.group, self.closed = [], False
        self.group.append(float(duration_s))
        self.end_s = float(now_s)

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        self.closed = True
        state = request.policy_state
        group = self.group if now_s == self.end_s else [0.0]
        state["ref.service_s"] = _fold(state.get("ref.service_s", 0.0), group)
        if request.num_output_tokens == num_tokens:
            return  # the first token
        state["ref.round_s"] = _fold(state.get("ref.round_s", 0.0), group)
        state["ref.rounds"] = state.get("ref.rounds", 0) + len(group)
        state["ref.round_tokens"] = state.get("ref.round_tokens", 0) + num_tokens


def _fold(start: float, durations: list[float]) -> float:
    for duration in durations:
        start += duration
    return start


@pytest.fixture(scope="module")
def _reference_policy() -> Iterator[None]:
    register_policy(_ServiceReference)
    yield
    POLICIES.unregister(_ServiceReference.name)


@pytest.mark.usefixtures("_reference_policy")
@pytest.mark.parametrize("fast_forward", [True, False], ids=["fast-forward", "per-step"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_the_scheduler_charges_what_the_steps_and_tokens_it_reports_add_up_to(
    scenario: Scenario, fast_forward: bool
) -> None:
    """Chunked prompts, preemptions (swap and recompute), speculative rounds, fast-forwarded stretches and PD
    hand-offs: every request's ``service_s`` is, bit for bit, what the hooks the scheduler calls add up to."""
    simulation = build_simulation(_ServiceReference.name, scenario.cluster, fast_forward=fast_forward)
    requests = scenario.requests()
    simulation.run(requests)
    served = [r for r in requests if r.num_output_tokens]
    assert served and any(r.service_s > 0.0 for r in served)
    assert any(r.service_rounds for r in served)
    for request in requests:
        state = request.policy_state
        assert request.service_s == state.get("ref.service_s", 0.0), request.request_id
        assert request.round_service_s == state.get("ref.round_s", 0.0), request.request_id
        assert request.service_rounds == state.get("ref.rounds", 0), request.request_id
        assert request.round_tokens == state.get("ref.round_tokens", 0), request.request_id


def test_policies_that_do_not_rank_by_service_are_charged_nothing() -> None:
    scenario = next(s for s in SCENARIOS if s.name == "heavy-tail")
    simulation = build_simulation("fcfs", scenario.cluster)
    requests = scenario.requests()
    simulation.run(requests)
    assert any(r.num_output_tokens for r in requests)
    assert all(r.service_s == 0.0 and r.service_rounds == 0 for r in requests)
