"""The service meter: each step's duration charged to the requests that emitted in it, one addition per step in
the order of the steps (its one-step path and ``charge`` give what the general fold gives, bit for bit)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from semsched.core.policy import Policy
from semsched.core.request import Request
from semsched.policies import make_policy
from semsched.policies.attained import ATTAINED, ROUND_TIME, ROUND_TOKENS, ROUNDS, ServiceMeter


def _fold(start: float, durations: list[float]) -> float:
    for duration in durations:
        start += duration
    return start


def test_tokens_and_charge_add_each_step_of_a_group_in_order() -> None:
    rng = random.Random(4)
    meter, charged = ServiceMeter(), ServiceMeter()
    counted = Request("counted", prompt_tokens=10, max_output_tokens=10_000, arrival_time_s=0.0)
    plain = Request("plain", prompt_tokens=10, max_output_tokens=10_000, arrival_time_s=0.0)
    attained = spent = 0.0
    rounds = tokens = 0
    now = 0.0
    for _ in range(400):
        group = [rng.choice([0.1, 0.2, 0.3, 1e-3 * rng.random(), 1e-17]) for _ in range(rng.choice([1, 1, 2, 5]))]
        for duration in group:
            now += duration
            meter.step(duration, now)
            charged.step(duration, now)
        off_step = rng.random() < 0.1  # tokens reported at another time than the step's end: charged nothing
        at = now + 1.0 if off_step else now
        charge = [0.0] if off_step else group
        emitted = rng.randint(1, 6)
        counted.num_output_tokens += emitted
        first = counted.num_output_tokens == emitted
        assert meter.tokens(counted, emitted, at) == (0 if first else len(charge))
        charged.charge(plain, at)
        attained = _fold(attained, charge)
        if not first:
            spent, rounds, tokens = _fold(spent, charge), rounds + len(charge), tokens + emitted
        assert counted.policy_state[ATTAINED] == plain.policy_state[ATTAINED] == attained
        assert counted.policy_state.get(ROUND_TIME, 0.0) == spent
        assert counted.policy_state.get(ROUNDS, 0) == rounds
        assert counted.policy_state.get(ROUND_TOKENS, 0) == tokens
    assert ROUNDS not in plain.policy_state  # charge counts no rounds


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


def test_las_charges_what_the_meter_charges() -> None:
    """``las``'s ``on_tokens`` (the meter's one-step path inline) adds what :meth:`ServiceMeter.charge` adds."""
    las, meter = make_policy("las"), ServiceMeter()
    heard = Request("heard", prompt_tokens=10, max_output_tokens=10_000, arrival_time_s=0.0)
    plain = Request("plain", prompt_tokens=10, max_output_tokens=10_000, arrival_time_s=0.0)
    for at in _reported_groups(random.Random(9), las, meter):
        las.on_tokens(heard, 1, at)
        meter.charge(plain, at)
        assert heard.policy_state[ATTAINED] == plain.policy_state[ATTAINED]


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
        for key in (ATTAINED, ROUND_TIME, ROUNDS, ROUND_TOKENS):
            assert heard.policy_state.get(key) == plain.policy_state.get(key), key
