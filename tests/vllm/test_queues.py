"""The adapter's keyed waiting queues: a re-key that keys only what may have changed (aging classes, or each key's
time to change) pops what re-keying every request pops, in the same order, through every operation vLLM and
the adapter perform on a queue."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field

import pytest

from semsched.vllm.queues import ClassedPolicyQueue, PolicyQueue


@dataclass(eq=False)
class _FakeRequest:
    request_id: str
    priority: int
    arrival_time: float
    turns: list[float] = field(default_factory=list)  # when its key changes (the keys that change at known times)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _stepped_key(request: _FakeRequest, now: float) -> tuple[float, ...]:
    """A key that changes at each of the request's turns (a starvation threshold, a deadline)."""
    return (request.priority - sum(1 for turn in request.turns if turn <= now), request.arrival_time)


def _aged_key(request: _FakeRequest, now: float) -> tuple[float, ...]:
    """tiered's key: the tier less an aging boost at one rate up to a cap, then arrival."""
    return (request.priority - min(max(now - request.arrival_time, 0.0) * 0.5, 3.0), request.arrival_time)


def _ids(requests: list[_FakeRequest]) -> list[str]:
    return [r.request_id for r in requests]


def _drive(seed: int, reference: PolicyQueue, queue: PolicyQueue, clock: _Clock, with_turns: bool) -> int:
    """Random operations on both queues, comparing what they show after each; returns how many re-keys ran."""
    rng = random.Random(seed)
    live: list[_FakeRequest] = []
    made = rekeys = 0

    def add() -> None:
        nonlocal made
        arrival = clock.now - rng.choice([0.0, 0.0, rng.uniform(0.0, 20.0), 5.0])  # (some equal arrivals)
        turns = sorted(clock.now + rng.uniform(0.0, 8.0) for _ in range(rng.randrange(3))) if with_turns else []
        request = _FakeRequest(f"r{made}", rng.randrange(3), arrival, turns)
        made += 1
        live.append(request)
        for q in (reference, queue):
            q.add_request(request)  # type: ignore[arg-type]

    for _ in range(400):
        op = rng.random()
        if op < 0.3 or not live:
            add()
        elif op < 0.4:
            popped = [q.pop_request() for q in (reference, queue)]
            assert popped[0] is popped[1]
            live.remove(popped[0])  # type: ignore[arg-type]
        elif op < 0.5:
            victim = rng.choice(live)
            live.remove(victim)
            for q in (reference, queue):
                q.remove_request(victim)  # type: ignore[arg-type]
        elif op < 0.56:
            chosen = rng.choice(live)
            for q in (reference, queue):
                q.bring_forward(chosen)  # type: ignore[arg-type]
        elif op < 0.62:
            chosen = rng.choice(live)
            for q in (reference, queue):
                q.rekey_request(chosen)  # type: ignore[arg-type]
        elif op < 0.8:
            clock.now += rng.choice([0.25, 1.0, 2.5])
            for q in (reference, queue):
                q.rekey()
            rekeys += 1
        else:  # a partial walk from the head, with a request added (a displaced victim) or removed meanwhile
            depth, seen = rng.randrange(1, 12), []
            for q in (reference, queue):
                with closing(q.in_order()) as walk:
                    seen.append(_ids([r for _, r in zip(range(depth), walk, strict=False)]))  # type: ignore[misc]
            assert seen[0] == seen[1]
            if rng.random() < 0.5 and live:
                walks = [q.in_order() for q in (reference, queue)]
                heads = [next(w, None) for w in walks]
                assert heads[0] is heads[1]
                if rng.random() < 0.5:
                    add()
                else:
                    victim = rng.choice(live)
                    live.remove(victim)
                    for q in (reference, queue):
                        q.remove_request(victim)  # type: ignore[arg-type]
                rest = [_ids(list(w)) for w in walks]  # type: ignore[arg-type]
                assert rest[0] == rest[1]
        assert len(queue) == len(reference) == len(live)
        assert queue.priority_counts == reference.priority_counts
        assert bool(queue) == bool(reference)
        if live:
            assert queue.peek_request() is reference.peek_request()
        if rng.random() < 0.1:
            assert _ids(list(queue)) == _ids(list(reference))  # type: ignore[arg-type]
    assert _ids([queue.pop_request() for _ in range(len(live))]) == \
        _ids([reference.pop_request() for _ in range(len(live))])  # type: ignore[arg-type]
    return rekeys


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("early", [False, True])
def test_a_queue_that_rekeys_only_the_keys_due_pops_what_a_full_rekey_pops(seed: int, early: bool) -> None:
    """Keys that change at known times (``until``): re-keying only those whose time has come gives the order of
    re-keying all. ``early``: a time given early (a key asked before it changes) costs a key, not the order."""
    rng = random.Random(1000 + seed)
    keyed: list[int] = [0]

    def key(request: _FakeRequest, now: float) -> tuple[float, ...]:
        keyed[0] += 1
        return _stepped_key(request, now)

    def until(request: _FakeRequest, now: float) -> float:
        turn = min((t for t in request.turns if t > now), default=math.inf)
        return turn - rng.uniform(0.0, 3.0) if early and math.isfinite(turn) else turn

    clock = _Clock()
    reference = PolicyQueue(_stepped_key, clock)  # type: ignore[arg-type]
    queue = PolicyQueue(key, clock, until=until)  # type: ignore[arg-type]
    rekeys = _drive(seed, reference, queue, clock, with_turns=True)
    assert rekeys > 20


@pytest.mark.parametrize("seed", range(12))
def test_a_queue_of_aging_classes_pops_what_a_full_rekey_pops(seed: int) -> None:
    """tiered's aging: within a tier the order is arrival order whatever the time, so a re-key keys one request
    per tier; what it pops, peeks, lists and walks (with additions and removals during a walk) is what re-keying
    every request gives."""
    clock = _Clock()

    def class_of(request: _FakeRequest) -> tuple[int, float]:
        return request.priority, request.arrival_time

    reference = PolicyQueue(_aged_key, clock)  # type: ignore[arg-type]
    queue = ClassedPolicyQueue(_aged_key, clock, class_of=class_of)  # type: ignore[arg-type]
    assert _drive(seed, reference, queue, clock, with_turns=False) > 20


def _costs(queue: PolicyQueue, key: Callable[[_FakeRequest, float], tuple[float, ...]], clock: _Clock,
           size: int) -> int:
    """Keys asked by one re-key of a queue of ``size`` requests, all keyed well before."""
    asked = [0]
    for i in range(size):
        queue.add_request(_FakeRequest(f"r{i}", i % 3, clock.now - i * 0.01,  # type: ignore[arg-type]
                                       [clock.now + 1000.0 + i]))
    queue._key = lambda r, now: (asked.__setitem__(0, asked[0] + 1), key(r, now))[1]  # type: ignore[assignment]
    clock.now += 1.0
    queue.rekey()
    return asked[0]


def test_a_rekey_costs_what_may_have_changed_not_the_queue() -> None:
    """The point of both queues: at 3,000 waiting, a re-key asks a key per class (three tiers) or none (no key
    due), where the full walk asks 3,000."""
    clock = _Clock()
    assert _costs(PolicyQueue(_aged_key, clock), _aged_key, clock, 3000) == 3000  # type: ignore[arg-type]
    classed = ClassedPolicyQueue(_aged_key, clock, class_of=lambda r: (r.priority, r.arrival_time))  # type: ignore
    assert _costs(classed, _aged_key, clock, 3000) == 3
    due = PolicyQueue(_stepped_key, clock, until=lambda r, now: min(t for t in r.turns if t > now))  # type: ignore
    assert _costs(due, _stepped_key, clock, 3000) == 0


@pytest.mark.parametrize("churn", [False, True])
def test_the_heaps_stay_within_a_bound_of_the_queue(churn: bool) -> None:
    """A server's queue sees every request once: requests that pass through (popped; with ``churn`` also removed,
    re-keyed, brought forward) leave no more than a bounded number of stale entries behind, whatever their
    number."""
    clock = _Clock()
    queues = [PolicyQueue(_stepped_key, clock, until=lambda r, now: math.inf),  # type: ignore[arg-type]
              ClassedPolicyQueue(_aged_key, clock, class_of=lambda r: (r.priority, r.arrival_time))]  # type: ignore
    for queue in queues:
        rng = random.Random(4)
        for i in range(20_000):
            request = _FakeRequest(f"r{i}", i % 3, clock.now)
            queue.add_request(request)  # type: ignore[arg-type]
            if churn and i % 7 == 0:
                queue.bring_forward(request)  # type: ignore[arg-type]
            if churn and i % 5 == 0:
                queue.rekey_request(request)  # type: ignore[arg-type]
            if i % 100 == 0:
                clock.now += 1.0
                queue.rekey()
            while len(queue) > 50:
                if not churn or rng.random() < 0.5:
                    queue.pop_request()
                else:
                    queue.remove_request(queue.peek_request())
        members = sum(len(m) for m in getattr(queue, "_classes", {}).values())
        assert len(queue._heap) + len(queue._due) + members <= 4 * (len(queue) + 64)
