"""fastserve: skip-join entry level, demotion by quantum, promotion of starved requests, displacement."""

from __future__ import annotations

import pytest

from semsched.policies import make_policy
from semsched.policies.fastserve import FastServe
from tests.policies.factories import displaced_by
from tests.policies.predicted import check_complete_and_exact
from tests.support import make_request


def _policy(spec: str = "fastserve") -> FastServe:
    policy = make_policy(spec)
    assert isinstance(policy, FastServe)
    return policy


def test_skip_join_enters_the_first_level_whose_quantum_covers_the_prefill() -> None:
    policy = _policy("fastserve:base_quantum_tokens=2;levels=8")
    assert policy.prefill_iterations(16) == 1 and policy.entry_level(16) == 0
    for prompt in (1000, 4000, 16000):
        needed, level = policy.prefill_iterations(prompt), policy.entry_level(prompt)
        assert policy.quantum(level) >= needed and (level == 0 or policy.quantum(level - 1) < needed)
    assert policy.entry_level(4000) > policy.entry_level(1000) > 0
    assert _policy("fastserve:base_quantum_tokens=2;levels=2").entry_level(16000) == 1  # the last level caps it


def test_a_request_is_demoted_when_it_has_used_its_levels_quantum() -> None:
    """Quanta 2, 4, 8: after 2 tokens level 1, after 2 + 4 level 2, and it stays at the last level."""
    policy = _policy("fastserve:base_quantum_tokens=2;levels=3")
    request = make_request(prompt=16, output=40)
    policy.on_arrival(request, 0.0)
    levels = [policy.level(request)]
    for _ in range(30):
        request.num_output_tokens += 1
        policy.on_tokens(request, 1, 0.0)
        levels.append(policy.level(request))
    assert levels[:8] == [0, 0, 1, 1, 1, 1, 2, 2] and levels[-1] == 2
    together = make_request(prompt=16, output=40)
    policy.on_arrival(together, 0.0)
    for count in (1, 4, 25):  # a fast-forwarded stretch reports its tokens at once
        together.num_output_tokens += count
        policy.on_tokens(together, count, 0.0)
    assert together.policy_state == request.policy_state | {"fastserve.queued_s": 0.0}


def test_a_starved_waiting_request_is_promoted_to_the_top_level() -> None:
    policy = _policy("fastserve:base_quantum_tokens=2;levels=3;starve_s=5")
    request = make_request(prompt=16, output=40)
    policy.on_arrival(request, 0.0)
    request.num_output_tokens = 7
    policy.on_tokens(request, 7, 1.0)
    policy.on_preempt(request, 2.0)
    assert policy.waiting_key(request, 6.9) == (2, 0.0)
    assert policy.waiting_key(request, 7.0) == (0, 0.0)
    assert policy.rekey_interval_s == 1.0 and _policy("fastserve:starve_s=0").rekey_interval_s is None
    assert _policy("fastserve:starve_s=0").waiting_key(request, 1e6) == (0, 0.0)  # (promoted above already)


def test_a_higher_level_arrival_displaces_demoted_running_work() -> None:
    running = [make_request("long", prompt=60, output=16)]
    newcomer = make_request("new", prompt=20, output=4, arrival=1.0)
    spec = "fastserve:base_quantum_tokens=1"  # "long" is demoted by its first token
    assert displaced_by(spec, running, newcomer, num_gpu_blocks=20) == ["long"]
    assert (
        displaced_by("fastserve", [make_request("long", prompt=60, output=16)], newcomer, num_gpu_blocks=20) == []
    )  # same level: FCFS, no displacement


@pytest.mark.parametrize("spec", ["fastserve", "fastserve:starve_s=0.3;check_s=0.1", "fastserve:starve_s=0"])
def test_completes_a_workload_identically_in_both_simulator_modes(spec: str) -> None:
    assert check_complete_and_exact(spec, max_num_seqs=4, num_gpu_blocks=200, block_size=16) > 0
