"""Tests for semsched/sim/router.py: the registry, the read-only instance view, the built-in routers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar

import pytest

from semsched.core.errors import SemschedError
from semsched.core.request import Request
from semsched.latency import load_profile
from semsched.sim.engine import Instance, Simulation
from semsched.sim.router import (
    ROUTERS,
    InstanceView,
    LeastOutstandingRouter,
    RoundRobinRouter,
    RouterError,
    make_router,
    register_router,
    router_names,
)
from semsched.sim.runner import ClusterSpec
from tests.support import make_request, make_scheduler, random_requests


class _Recording:
    """Sends everything to the last instance and keeps what it saw."""

    name: ClassVar[str] = "test-recording"
    seen: ClassVar[list[tuple[str, list[tuple[int, int, int, int]]]]] = []

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        loads = [(v.index, v.num_waiting, v.num_running, v.num_free_gpu_blocks) for v in instances]
        self.seen.append((request.request_id, loads))
        return len(instances) - 1


@pytest.fixture
def recording() -> Iterator[type[_Recording]]:
    register_router(_Recording)
    _Recording.seen.clear()
    yield _Recording
    ROUTERS.pop(_Recording.name)


def _cluster(router: str, count: int = 2, **config: object) -> Simulation:
    latency = load_profile("a100-qwen1.5-4b")
    instances = [Instance(make_scheduler("fcfs", **config), latency) for _ in range(count)]
    return Simulation(instances, make_router(router))


def test_known_names_build_fresh_routers() -> None:
    assert {"round-robin", "least-outstanding"} <= set(router_names())
    assert isinstance(make_router("round-robin"), RoundRobinRouter)
    assert isinstance(make_router("least-outstanding"), LeastOutstandingRouter)
    assert make_router("round-robin") is not make_router("round-robin")  # each has its own cursor


def test_an_unknown_name_is_a_semsched_error_listing_the_known_ones() -> None:
    with pytest.raises(
        RouterError,
        match=r"unknown router 'random'; known routers: go-routing, least-outstanding, min-load, prefix-affinity, "
              r"round-robin"
    ):
        make_router("random")
    assert issubclass(RouterError, SemschedError)
    with pytest.raises(RouterError, match="unknown router 'random'"):
        ClusterSpec(router="random")  # before any simulation


def test_a_name_registered_twice_is_refused(recording: type[_Recording]) -> None:
    register_router(recording)  # the same class again is fine

    class Other(_Recording):
        pass

    with pytest.raises(RouterError, match="router name 'test-recording' registered twice"):
        register_router(Other)


def test_a_registered_router_sees_read_only_views_of_the_instances(recording: type[_Recording]) -> None:
    requests = [make_request(str(i), prompt=64, output=20, arrival=0.001 * i) for i in range(3)]
    _cluster("test-recording", num_gpu_blocks=100, block_size=16).run(requests)
    # all three go to instance 1: the first starts at once; the second arrives during its step, so it still
    # waits when the third arrives
    assert [request_id for request_id, _ in recording.seen] == ["0", "1", "2"]
    assert recording.seen[0][1] == [(0, 0, 0, 100), (1, 0, 0, 100)]
    assert [loads[1][1:3] for _, loads in recording.seen[1:]] == [(0, 1), (1, 1)]
    assert [loads[0][1:] for _, loads in recording.seen] == [(0, 0, 100)] * 3  # instance 0 never got one
    assert recording.seen[1][1][1][3] < 100  # the running one holds blocks
    assert all(r.state.is_terminal and r.num_output_tokens == 20 for r in requests)


def test_a_view_exposes_state_but_not_the_scheduler() -> None:
    scheduler = make_scheduler("fcfs", num_gpu_blocks=50, block_size=8)
    scheduler.add_request(make_request("a", prompt=20), 0.0)
    scheduler.schedule(0.0)
    scheduler.add_request(make_request("b"), 0.0)
    view = InstanceView(3, scheduler)
    assert (view.index, view.num_waiting, view.num_running, view.num_unfinished) == (3, 1, 1, 2)
    assert (view.num_gpu_blocks, view.block_size, view.num_free_gpu_blocks) == (50, 8, 47)
    assert [r.request_id for r in view.running_requests()] == ["a"]
    for mutator in ("add_request", "schedule", "update", "abort", "kv"):
        assert not hasattr(view, mutator)
    with pytest.raises(AttributeError):
        view.num_waiting = 0  # type: ignore[misc]


class _Outside:
    name: ClassVar[str] = "outside"

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        return len(instances)


def test_a_router_choosing_a_missing_instance_is_named() -> None:
    latency = load_profile("a100-qwen1.5-4b")
    simulation = Simulation([Instance(make_scheduler(), latency)], _Outside())
    with pytest.raises(RouterError, match=r"router 'outside' chose instance 1; there are 1 \(0 to 0\)"):
        simulation.run([make_request()])


def test_least_outstanding_balances_where_round_robin_does_not() -> None:
    # alternating long and short requests: round-robin gives every long one to instance 0
    def per_instance_tokens(router: str) -> list[int]:
        requests = [
            make_request(str(i), prompt=32, output=400 if i % 2 == 0 else 4, arrival=0.05 * i) for i in range(40)
        ]
        simulation = _cluster(router)
        simulation.run(requests)
        return [len(i.scheduler.timeline) for i in simulation.instances]

    round_robin, least = per_instance_tokens("round-robin"), per_instance_tokens("least-outstanding")
    assert round_robin[0] > 5 * round_robin[1]
    assert max(least) < 2 * min(least)


def test_round_robin_takes_instances_in_turn() -> None:
    router = RoundRobinRouter()
    views = [InstanceView(i, make_scheduler()) for i in range(3)]
    assert [router.route(r, views, 0.0) for r in random_requests(0, 7)] == [0, 1, 2, 0, 1, 2, 0]
