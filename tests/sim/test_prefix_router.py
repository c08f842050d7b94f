"""``prefix-affinity`` (semsched/sim/prefix_router.py) and prefix caching in the simulator (issue 32)."""

from __future__ import annotations

import pytest

from semsched.core.prefix import token_block_hashes
from semsched.core.request import Request
from semsched.core.scheduler import SchedulerConfig
from semsched.sim.prefix_router import PrefixAffinityConfig, PrefixAffinityRouter, PrefixTable
from semsched.sim.router import RouterError, make_router, router_names
from semsched.sim.runner import ClusterSpec, build_simulation
from tests.support import make_request


class _View:
    """An instance as a router sees it: only its load."""

    def __init__(self, index: int, unfinished: int) -> None:
        self.index, self.num_unfinished = index, unfinished


def _views(*loads: int) -> list[_View]:
    return [_View(i, load) for i, load in enumerate(loads)]


def _hashed(request_id: str, tokens: list[int], **fields: object) -> Request:
    return make_request(request_id, prompt=len(tokens), prefix_hashes=token_block_hashes(tokens, 16), **fields)


def test_registered_and_configured_by_spec() -> None:
    assert "prefix-affinity" in router_names()
    router = make_router("prefix-affinity:max_imbalance=2;slack_requests=0")
    assert isinstance(router, PrefixAffinityRouter)
    assert router.config == PrefixAffinityConfig(max_imbalance=2.0, slack_requests=0)
    with pytest.raises(RouterError, match="max_imbalance"):
        make_router("prefix-affinity:max_imbalance=0.5")
    with pytest.raises(RouterError, match="min_match_blocks"):
        PrefixAffinityConfig(min_match_blocks=0)


def test_a_repeated_prefix_follows_its_instance() -> None:
    router = PrefixAffinityRouter()
    prefix = list(range(64))
    first = router.route(_hashed("a", prefix), _views(3, 0, 1), 0.0)
    assert first == 1  # no match: least outstanding
    again = router.route(_hashed("b", [*prefix, *range(100, 140)]), _views(3, 2, 0), 1.0)
    assert again == 1  # its prefix was served by 1, loaded within its share
    assert router.decisions == {"affinity": 1, "overloaded": 0, "unmatched": 1}


def test_an_overloaded_instance_is_passed_over() -> None:
    router = PrefixAffinityRouter(PrefixAffinityConfig(max_imbalance=1.5, slack_requests=2))
    prefix = list(range(64))
    assert router.route(_hashed("a", prefix), _views(0, 5), 0.0) == 0
    assert router.route(_hashed("b", prefix), _views(9, 4), 1.0) == 1  # 9 > max(1.5 * 4, 4 + 2)
    assert router.decisions["overloaded"] == 1
    assert router.route(_hashed("c", prefix), _views(7, 4), 2.0) == 1  # recorded on 1 now


def test_requests_without_hashes_go_to_the_least_loaded() -> None:
    router = PrefixAffinityRouter()
    assert router.route(make_request("a"), _views(2, 1, 3), 0.0) == 1
    assert router.decisions["unmatched"] == 1


def test_table_matches_the_longest_prefix_and_drops_from_the_end() -> None:
    table = PrefixTable(max_entries=3, ttl_s=10.0)
    table.record((1, 2, 3), 0, 0.0)
    assert table.lookup((1, 2, 9), 1.0) == (0, 2)
    table.record((5,), 1, 2.0)  # over the bound: the deepest block of the older prefix goes first
    assert len(table) == 3
    assert table.lookup((1, 2, 3), 3.0) == (0, 2)
    assert table.lookup((1, 2), 20.0) == (None, 0)  # stale


def _cluster(caching: bool, router: str = "least-outstanding", instances: int = 1) -> ClusterSpec:
    return ClusterSpec(num_instances=instances, router=router,
                       scheduler=SchedulerConfig(enable_prefix_caching=caching))


def _turns() -> list[Request]:
    """A long first turn, and a second turn that extends it, arriving after the first has finished."""
    first = list(range(2000))
    return [_hashed("t1", first, output=4), _hashed("t2", [*first, *range(5000, 5100)], output=4, arrival=5.0)]


@pytest.mark.parametrize("caching", [False, True])
def test_a_cached_prefix_shortens_the_second_turns_ttft(caching: bool) -> None:
    requests = _turns()
    build_simulation("fcfs", _cluster(caching)).run(requests)
    second = requests[1]
    assert second.first_token_time_s is not None
    ttft = second.first_token_time_s - second.arrival_time_s
    alone = [_hashed("t2", list(range(2100)), output=4, arrival=5.0)]  # the same prompt with nothing cached
    build_simulation("fcfs", _cluster(caching)).run(alone)
    assert alone[0].first_token_time_s is not None
    uncached = alone[0].first_token_time_s - alone[0].arrival_time_s
    if caching:
        assert second.num_cached_tokens == 2000 // 16 * 16
        assert ttft < 0.5 * uncached
    else:
        assert second.num_cached_tokens == 0
        assert ttft == pytest.approx(uncached)


def test_prefix_affinity_keeps_turns_on_one_instance_in_a_cluster() -> None:
    def second_turn_cached(router: str) -> int:
        requests = _turns() + [_hashed("other", list(range(9000, 9500)), output=200, arrival=4.9)]
        requests.sort(key=lambda r: r.arrival_time_s)
        build_simulation("fcfs", _cluster(True, router, instances=2)).run(requests)
        return next(r.num_cached_tokens for r in requests if r.request_id == "t2")

    # "other" lands on instance 0, where the first turn ran: least-outstanding sends the second turn to the idle
    # instance 1 and recomputes its prefix; prefix-affinity follows the prefix (within its load bound)
    assert second_turn_cached("least-outstanding") == 0
    assert second_turn_cached("prefix-affinity") == 2000 // 16 * 16


def test_caching_off_gives_the_same_results_with_or_without_hashes() -> None:
    def run(hashes: bool) -> list[float]:
        requests = [_hashed(str(i), [i % 3] * 300 + list(range(i * 7)), output=20, arrival=0.05 * i)
                    for i in range(30)]
        if not hashes:
            requests = [make_request(r.request_id, prompt=r.prompt_tokens, output=20, arrival=r.arrival_time_s)
                        for r in requests]
        build_simulation("fcfs", _cluster(False)).run(requests)
        return [float(t) for r in requests for t in r.token_times_s()]

    assert run(True) == run(False)
