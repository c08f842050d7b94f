"""fastserve: skip-join entry level, demotion by quantum, promotion of starved requests, displacement."""

from __future__ import annotations

import itertools
import math
import random
from typing import cast

import pytest

from semsched.core.policy import SchedulerView, SortKey, next_rekey_s
from semsched.core.request import Request, RequestState
from semsched.policies import make_policy
from semsched.policies.fastserve import FastServe
from tests.policies.factories import displaced_by, running_request_event
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
    marks = {"fastserve.enqueued": together.policy_state["fastserve.enqueued"]}  # (its own entry in the queue)
    assert together.policy_state == request.policy_state | {"fastserve.queued_s": 0.0} | marks


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


def test_waiting_order_is_the_keyed_queues_order_with_promotion_at_the_check_instants() -> None:
    """The core asks ``waiting_order`` (no keys): it must give the order of a queue keyed by ``waiting_key`` at
    enqueue and re-keyed at the first step of each ``check_s`` (ties in enqueue order), modelled here."""
    spec = "fastserve:base_quantum_tokens=2;levels=3;starve_s=5;check_s=1"
    ordered, keyed = _policy(spec), _policy(spec)
    requests = {
        policy: {
            name: make_request(name, prompt=prompt, output=40, arrival=arrival)
            for name, prompt, arrival in (("r0", 16, 0.0), ("r1", 4000, 1.0), ("r5", 4000, 2.4),
                                          ("r3", 16, 3.0), ("r2", 16, 3.0), ("r4", 16, 3.0))
        }
        for policy in (ordered, keyed)
    }
    keys: dict[str, tuple[SortKey, int]] = {}
    enqueued = itertools.count()

    def enqueue(policy: FastServe, request: Request, now_s: float) -> None:
        if policy is keyed:
            keys[request.request_id] = (policy.waiting_key(request, now_s), next(enqueued))

    def events(policy: FastServe) -> None:
        mine = requests[policy]
        for name in ("r0", "r1", "r5", "r3", "r2", "r4"):  # r3 enqueued before r2, same arrival
            request = mine[name]
            policy.on_arrival(request, request.arrival_time_s)
            enqueue(policy, request, request.arrival_time_s)
        r0 = mine["r0"]  # r0 runs, is demoted to level 2 and preempted at 2.0
        r0.state, r0.num_output_tokens = RequestState.RUNNING, 7
        policy.on_tokens(r0, 7, 1.5)
        r0.state = RequestState.PREEMPTED_RECOMPUTE
        policy.on_preempt(r0, 2.0)
        enqueue(policy, r0, 2.0)
        mine["r4"].state = RequestState.RUNNING  # admitted: no longer waiting

    events(ordered)
    events(keyed)
    next_check = -math.inf
    for now in (3.5, 6.9, 7.0, 7.5, 8.0):  # r1 due at 6.0, r0 at 7.0, r5 at 7.4 (promoted at 8.0, not 7.5)
        ordered.step_budget(cast(SchedulerView, None), now)
        got = [r.request_id for r in ordered.waiting_order(cast(SchedulerView, None), now)]
        waiting = [r for r in requests[keyed].values() if r.state is not RequestState.RUNNING]
        if now >= next_check:
            next_check = next_rekey_s(now, 1.0)
            for request in waiting:
                keys[request.request_id] = (keyed.waiting_key(request, now), keys[request.request_id][1])
        assert got == sorted((r.request_id for r in waiting), key=keys.__getitem__), now
    assert [ordered.level(r) for r in requests[ordered].values()] == [
        keyed.level(r) for r in requests[keyed].values()
    ]
    assert got[:3] == ["r0", "r1", "r5"]  # all three promoted by 8.0 (the test's premise)
    with pytest.raises(RuntimeError):
        list(keyed.waiting_order(cast(SchedulerView, None), 9.0))  # keyed by waiting_key: the heaps are off


def test_victims_are_the_higher_levels_by_victim_key_descending_ties_in_running_order() -> None:
    """``victims_for`` decorates each victim with its key and place: the stable sort of the filtered list."""
    policy = _policy()
    rng = random.Random(5)
    for trial in range(300):
        running = [make_request(prompt=16, output=40, arrival=float(rng.randint(0, 3))) for _ in range(12)]
        for request in running:
            if rng.random() < 0.9:  # (the others get their entry level when first asked)
                request.policy_state["fastserve.level"] = rng.randint(0, 3)
                request.policy_state["fastserve.used"] = 0
        candidate = make_request(prompt=16, output=40, arrival=2.0)
        candidate.policy_state["fastserve.level"] = rng.randint(0, 2)
        mine = policy.level(candidate)
        expected = sorted([r for r in running if policy.victim_key(r)[0] > mine], key=policy.victim_key,
                          reverse=True)
        assert policy.victims_for(candidate, running, cast(SchedulerView, None), 0.0) == expected, trial


def test_a_scheduler_that_skips_emissions_before_notify_tokens_at_sees_the_same_levels() -> None:
    """Tokens used are counted from ``num_output_tokens``: a request heard only from its ``notify_tokens_at`` on
    is demoted at the same emissions as one heard at each, through a promotion too; each demotion is counted in
    ``victim_key_changes``."""
    policy = _policy("fastserve:base_quantum_tokens=2;levels=4;starve_s=1")
    every, skipped = make_request("every", prompt=16, output=500), make_request("skipped", prompt=16, output=500)
    for request in (every, skipped):
        policy.on_arrival(request, 0.0)
    rng = random.Random(2)
    for step in range(120):
        if step == 60:
            for request in (every, skipped):
                policy._promote(request, 1.0)
        count = rng.choice([1, 1, 1, 3, 7])
        every.num_output_tokens += count
        skipped.num_output_tokens += count
        changes, level = policy.victim_key_changes, policy.level(every)
        policy.on_tokens(every, count, 0.0)
        assert policy.victim_key_changes == changes + (policy.level(every) != level)
        if skipped.num_output_tokens >= skipped.notify_tokens_at:
            policy.on_tokens(skipped, count, 0.0)
        assert policy.victim_key(skipped) == policy.victim_key(every), step
    assert policy.level(every) == 3 and skipped.notify_tokens_at > skipped.num_output_tokens


@pytest.mark.parametrize("seed", range(4))
def test_the_kept_victim_keys_are_the_keys_the_requests_state_gives(seed: int) -> None:
    """The schedulers read ``victim_key`` from the policy's kept keys: through arrivals, emissions (demotions),
    preemptions, promotions, finishes and hand-offs, each running request's kept key is what the method gives."""
    policy = _policy("fastserve:base_quantum_tokens=2;levels=4;starve_s=1")
    rng = random.Random(seed)
    requests = [make_request(f"r{i}", prompt=rng.choice([16, 2000, 8000]), output=10_000, arrival=float(i % 7))
                for i in range(30)]
    for request in requests:
        policy.on_arrival(request, 0.0)
    for now in range(400):
        request = rng.choice(requests)
        action = rng.random()
        if request.state is RequestState.RUNNING:
            running_request_event(policy, request, action, rng, float(now))
        elif request.state is not RequestState.FINISHED:
            if action < 0.2:
                policy._promote(request, float(now))
            else:
                request.state = RequestState.RUNNING
                request.notify_tokens_at = 0
        running = [r for r in requests if r.state is RequestState.RUNNING]
        assert [policy.victim_key(r) for r in running] == [(policy.level(r), r.arrival_time_s) for r in running]
