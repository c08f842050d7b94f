"""Attained service: the scheduler's ``Request.service_s`` (each step's duration charged to the requests that
emitted in it, one addition per step in the order of the steps), and the service meter's rounds and round time
(its one-step path gives what the general fold gives, bit for bit)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import ClassVar

import pytest

from semsched.core.policy import Policy
from semsched.core.request import Request
from semsched.policies import POLICIES, make_policy
from semsched.policies.attained import ROUND_TIME, ROUND_TOKENS, ROUNDS, ServiceMeter
from semsched.policies.las import LAS
from semsched.policies.registry import register_policy
from semsched.sim.runner import build_simulation
from tests.sim.test_stress import SCENARIOS, Scenario


def _fold(start: float, durations: list[float]) -> float:
    for duration in durations:
        start += duration
    return start


def test_tokens_add_each_step_of_a_group_in_order() -> None:
    rng = random.Random(4)
    meter = ServiceMeter()
    counted = Request("counted", prompt_tokens=10, max_output_tokens=10_000, arrival_time_s=0.0)
    spent = 0.0
    rounds = tokens = 0
    now = 0.0
    for _ in range(400):
        group = [rng.choice([0.1, 0.2, 0.3, 1e-3 * rng.random(), 1e-17]) for _ in range(rng.choice([1, 1, 2, 5]))]
        for duration in group:
            now += duration
            meter.step(duration, now)
        off_step = rng.random() < 0.1  # tokens reported at another time than the step's end: charged nothing
        at = now + 1.0 if off_step else now
        charge = [0.0] if off_step else group
        emitted = rng.randint(1, 6)
        counted.num_output_tokens += emitted
        first = counted.num_output_tokens == emitted
        assert meter.tokens(counted, emitted, at) == (0 if first else len(charge))
        if not first:
            spent, rounds, tokens = _fold(spent, charge), rounds + len(charge), tokens + emitted
        assert counted.policy_state.get(ROUND_TIME, 0.0) == spent
        assert counted.policy_state.get(ROUNDS, 0) == rounds
        assert counted.policy_state.get(ROUND_TOKENS, 0) == tokens


def _reported_groups(rng: random.Random, policy: Policy, meter: ServiceMeter) -> Iterator[float]:
    """400 groups of steps (one step mostly, or a fast-forwarded stretch), each reported to ``policy`` and to
    ``meter`` alike; yields, after each group, the time its tokens are reported at (a tenth of them at another time
    than the last step's end, which charges nothing) once per request of the step (1 or 2)."""
    now = 0.0
    for _ in range(400):
        group = [rng.choice([0.1, 0.3, 1e-3 * rng.random(), 1e-17]) for _ in range(rng.choice([1, 1, 1, 2, 5]))]
        for duration in group:
            now += duration
            policy.on_step([], 1, 10, duration, now)
            meter.step(duration, now)
        at = now + 1.0 if rng.random() < 0.1 else now
        for _ in range(rng.choice([1, 1, 2])):  # (several requests of one step: the same group)
            yield at


def test_laps_sd_counts_what_the_meter_counts() -> None:
    """``laps-sd``'s ``on_tokens`` (the meter's one-step path inline) adds the service, round time, rounds and
    round tokens :meth:`ServiceMeter.tokens` adds, the prompt's first token and multi-step groups included."""
    rng = random.Random(10)
    laps, meter = make_policy("laps-sd"), ServiceMeter()
    heard = Request("heard", prompt_tokens=10, max_output_tokens=100_000, arrival_time_s=0.0)
    plain = Request("plain", prompt_tokens=10, max_output_tokens=100_000, arrival_time_s=0.0)
    for at in _reported_groups(rng, laps, meter):
        emitted = rng.choice([1, 1, 3])
        for request in (heard, plain):
            request.num_output_tokens += emitted
        laps.on_tokens(heard, emitted, at)
        meter.tokens(plain, emitted, at)
        for key in (ROUND_TIME, ROUNDS, ROUND_TOKENS):
            assert heard.policy_state.get(key) == plain.policy_state.get(key), key


class _ServiceReference(LAS):
    """``las`` that also keeps, beside the scheduler's ``service_s``, the accounting of hooks alone: the steps
    reported by ``on_step`` since the last ``on_tokens`` form a group, charged to each request whose tokens are
    reported at the group's last end (the rule the scheduler follows natively)."""

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
        charged = request.policy_state.get("reference.service_s", 0.0)
        for duration in (self.group if now_s == self.end_s else ()):
            charged += duration
        request.policy_state["reference.service_s"] = charged


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
    for request in requests:
        assert request.service_s == request.policy_state.get("reference.service_s", 0.0), request.request_id


def test_policies_that_do_not_rank_by_service_are_charged_nothing() -> None:
    scenario = next(s for s in SCENARIOS if s.name == "heavy-tail")
    simulation = build_simulation("fcfs", scenario.cluster)
    requests = scenario.requests()
    simulation.run(requests)
    assert any(r.num_output_tokens for r in requests) and all(r.service_s == 0.0 for r in requests)
