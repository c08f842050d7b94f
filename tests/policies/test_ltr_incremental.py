"""ltr's incremental waiting order (``waiting_order``): the keyed queue's, promotion at the re-key instants."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import cast

import pytest

from semsched.core.policy import SchedulerView, SortKey, next_rekey_s
from semsched.core.request import Request, RequestState
from semsched.policies import make_policy
from semsched.policies.ltr import LTR
from tests.support import make_request

_VIEW = cast(SchedulerView, None)


def _policy(spec: str) -> LTR:
    policy = make_policy(spec)
    assert isinstance(policy, LTR)
    return policy


def test_waiting_order_is_the_keyed_queues_order_with_promotion_at_the_check_instants() -> None:
    """The core asks ``waiting_order`` (no keys): it must give the order of a queue keyed by ``waiting_key`` at
    enqueue and re-keyed at the first step of each ``check_s`` (ties in enqueue order), modelled here."""
    spec = "ltr:starve_s=5;check_s=1;quantum_tokens=3"
    ordered, keyed = _policy(spec), _policy(spec)
    names = ("r0", "r6", "r1", "r5", "r3", "r2", "r4")  # arrival order; r3 enqueued before r2, same arrival
    shapes = {"r0": (50, 0.0), "r6": (60, 0.2), "r1": (40, 1.0), "r5": (45, 2.4),
              "r3": (10, 3.2), "r2": (10, 3.2), "r4": (5, 3.2)}
    requests = {
        policy: {name: make_request(name, output=shapes[name][0], arrival=shapes[name][1]) for name in names}
        for policy in (ordered, keyed)
    }
    keys: dict[str, tuple[SortKey, int]] = {}
    enqueued = itertools.count()

    def enqueue(policy: LTR, request: Request, now_s: float) -> None:
        if policy is keyed:
            keys[request.request_id] = (policy.waiting_key(request, now_s), next(enqueued))

    def arrive(policy: LTR, name: str) -> None:
        request = requests[policy][name]
        policy.on_arrival(request, request.arrival_time_s)
        enqueue(policy, request, request.arrival_time_s)

    def run_and_preempt(policy: LTR, name: str, tokens: int, ran_s: float, preempted_s: float) -> None:
        request = requests[policy][name]
        request.state = RequestState.RUNNING
        if tokens:
            request.num_output_tokens += tokens
            policy.on_tokens(request, tokens, ran_s)
        request.state = RequestState.PREEMPTED_RECOMPUTE
        policy.on_preempt(request, preempted_s)
        enqueue(policy, request, preempted_s)

    def start(policy: LTR, name: str) -> None:
        requests[policy][name].state = RequestState.RUNNING  # admitted: no longer waiting

    next_check = -math.inf
    got: list[str] = []

    def step(now: float) -> None:
        nonlocal next_check, got
        ordered.step_budget(_VIEW, now)
        got = [r.request_id for r in ordered.waiting_order(_VIEW, now)]
        waiting = [r for r in requests[keyed].values() if r.state is not RequestState.RUNNING]
        if now >= next_check:
            next_check = next_rekey_s(now, 1.0)
            for request in waiting:
                keys[request.request_id] = (keyed.waiting_key(request, now), keys[request.request_id][1])
        assert got == sorted((r.request_id for r in waiting), key=keys.__getitem__), now

    timeline: list[tuple[float, Callable[[LTR], None]]] = [
        (0.0, lambda p: arrive(p, "r0")),
        (0.2, lambda p: arrive(p, "r6")),
        (1.0, lambda p: arrive(p, "r1")),
        (1.5, lambda p: run_and_preempt(p, "r0", 0, 1.0, 1.5)),  # due at 6.5: promoted at 7.0
        (2.4, lambda p: arrive(p, "r5")),  # due at 7.4: promoted at 8.0, not 7.5
        (3.2, lambda p: arrive(p, "r3")),
        (3.2, lambda p: arrive(p, "r2")),
        (3.2, lambda p: arrive(p, "r4")),
        (3.2, lambda p: start(p, "r4")),
        (5.6, lambda p: run_and_preempt(p, "r6", 1, 5.8, 6.0)),  # promoted at 5.5, keeps 2 tokens of it
    ]
    checks = (3.5, 5.5, 6.2, 6.9, 7.0, 7.5, 8.0)
    for now in sorted({t for t, _ in timeline} | set(checks)):
        for at, event in timeline:
            if at == now:
                event(ordered)
                event(keyed)
        if now in checks:
            step(now)

    def states(policy: LTR) -> list[dict[str, float]]:  # (less the heap marks)
        return [{k: v for k, v in r.policy_state.items() if k != "ltr.enqueued"}
                for r in requests[policy].values()]

    assert states(ordered) == states(keyed)
    assert got == ["r1", "r5", "r0", "r6", "r3", "r2"]  # the test's premise: promoted by score, ties kept
    with pytest.raises(RuntimeError):
        list(keyed.waiting_order(_VIEW, 9.0))  # keyed by waiting_key: the heaps are off


def test_without_starvation_prevention_the_order_is_score_then_arrival() -> None:
    policy = _policy("ltr:starve_s=0")
    assert not policy.uses_hook("step_budget") and policy.uses_hook("on_arrival")
    requests = [make_request("a", output=30, arrival=0.0), make_request("b", output=10, arrival=1.0),
                make_request("c", output=10, arrival=0.5)]
    for request in requests:
        policy.on_arrival(request, request.arrival_time_s)
    assert [r.request_id for r in policy.waiting_order(_VIEW, 2.0)] == ["c", "b", "a"]
    assert all("ltr.queued_s" not in r.policy_state for r in requests)


@pytest.mark.parametrize("spec", ["ltr:starve_s=0", "fastserve"])
def test_an_order_read_in_part_leaves_the_next_one_whole(spec: str) -> None:
    """A consumer that reads part of an order without admitting anything (the requests it was given still wait)
    and drops it, then meets an arrival, gets every waiting request from the next order, in its keyed order."""
    policy = make_policy(spec)
    requests = [make_request(f"r{i}", output=10 * (5 - i), arrival=0.1 * i) for i in range(5)]
    for request in requests:
        policy.on_arrival(request, request.arrival_time_s)
    keyed = make_policy(spec)
    keys = {r.request_id: keyed.waiting_key(r, 1.0) for r in requests}
    whole = sorted(keys, key=keys.__getitem__)
    order = iter(policy.waiting_order(_VIEW, 1.0))
    assert [next(order).request_id for _ in range(3)] == whole[:3]
    del order
    late = make_request("late", output=1, arrival=1.5)
    policy.on_arrival(late, late.arrival_time_s)
    keys["late"] = keyed.waiting_key(late, 2.0)
    expected = sorted(keys, key=keys.__getitem__)
    assert [r.request_id for r in policy.waiting_order(_VIEW, 2.0)] == expected
    assert [r.request_id for r in policy.waiting_order(_VIEW, 2.0)] == expected  # (and again, read whole)
