"""LAPS-SD (seed 004) and its baselines LAS and LP-SJF: thresholds, demotion, perceptibility, eq. 6, who is
displaced."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import ClassVar

import pytest

from semsched.core.plan import PreemptionMode
from semsched.core.policy import SchedulerView
from semsched.core.request import LengthDistribution, Request, RequestState
from semsched.core.scheduler import Scheduler, SchedulerConfig, charge_service
from semsched.policies import POLICIES, make_policy
from semsched.policies.attained import attained_s, mean_round_s, rounds
from semsched.policies.laps_sd import LapsSD, estimated_time_s, is_stable, queue_bounds_s, queue_of
from semsched.policies.las import LAS
from semsched.policies.registry import register_policy
from semsched.sim.runner import build_simulation
from tests.policies.factories import service_order
from tests.sim.test_stress import SCENARIOS


def _request(rid: str, output: int = 100, *, arrival: float = 0.0, priority: int = 0,
             predicted: int | None = None) -> Request:
    request = Request(rid, prompt_tokens=10, max_output_tokens=output, arrival_time_s=arrival,
                      output_tokens=output, priority=priority)
    if predicted is not None:
        request.predicted_output = LengthDistribution.point(predicted)
    return request


def _serve(
    policy: LapsSD | LAS, request: Request, yields: list[int], round_s: float, start_s: float = 0.0
) -> float:
    """Feed ``policy`` the prefill step (the first time) and then one round per yield, as the scheduler would
    (the step reported, the request charged its service, then its tokens); returns the time."""
    now = start_s
    if request.num_output_tokens == 0:
        now += round_s
        policy.on_step([(request.prompt_tokens, 0)], 0, 0, round_s, now)
        request.num_output_tokens += 1
        charge_service(request, [round_s], 1)
        policy.on_tokens(request, 1, now)
    for value in yields:
        now += round_s
        policy.on_step([], 1, request.prompt_tokens, round_s, now)
        request.num_output_tokens += value
        charge_service(request, [round_s], value)
        policy.on_tokens(request, value, now)
    return now


def test_eq6_against_hand_computation() -> None:
    # L = 100 tokens, A = 0.5, n = 4: 100 / 3 rounds, each 4 x 10 ms drafting + 30 ms verification
    assert estimated_time_s(100, 0.5, 4, 0.010, 0.030) == pytest.approx(100 / 3 * 0.070)
    assert estimated_time_s(60, 1.0, 5, 0.002, 0.020) == pytest.approx(10 * 0.030)
    assert estimated_time_s(60, 0.0, 5, 0.002, 0.020) == pytest.approx(60 * 0.030)  # nothing accepted


def test_queue_thresholds_are_exponential_and_the_last_queue_is_unbounded() -> None:
    bounds = queue_bounds_s(4, 2.0, 0.5)
    assert bounds == (0.5, 1.0, 2.0)
    assert [queue_of(s, bounds) for s in (0.0, 0.49, 0.5, 0.99, 1.0, 1.99, 2.0, 1e9)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert queue_bounds_s(1, 2.0, 0.5) == ()
    assert queue_of(123.0, ()) == 0


def test_stability_detection_on_constructed_sequences() -> None:
    assert is_stable([0.5, 0.6, 0.52, 0.53, 0.54], gamma=3, delta=0.05)
    assert not is_stable([0.5, 0.6, 0.52, 0.53, 0.54], gamma=4, delta=0.05)  # the window reaches 0.6
    assert not is_stable([0.52, 0.53], gamma=3, delta=0.05)  # too few rounds
    assert not is_stable([0.50, 0.55, 0.52], gamma=3, delta=0.05)  # max - min = 0.05 is not below delta
    assert is_stable([0.3] * 4, gamma=4, delta=1e-9)


def test_a_request_becomes_perceptible_once_its_cumulative_rate_settles() -> None:
    policy = make_policy("laps-sd:gamma=3;delta=0.05;draft_tokens=4")
    assert isinstance(policy, LapsSD)
    request = _request("r", 1000, predicted=400)
    # yields 1, 5, 3, 3, 3, ...: cumulative tokens per round 1, 3, 3, 3 -> rates 0, .5, .5, .5
    _serve(policy, request, [1, 5], 0.02)
    assert not policy.perceptible(request)
    assert policy.acceptance_rate(request) == pytest.approx(0.5)
    _serve(policy, request, [3], 0.02, start_s=10.0)
    assert not policy.perceptible(request)  # window (0, .5, .5): spread .5
    _serve(policy, request, [3], 0.02, start_s=20.0)
    assert policy.perceptible(request)
    assert request.policy_state["laps.rate"] == pytest.approx(0.5)
    # eq. 6 with the measured round time: L / (n A + 1) rounds of 20 ms
    assert mean_round_s(request) == pytest.approx(0.02)
    assert policy.estimated_time_s(request) == pytest.approx(400 / 3 * 0.02)
    assert rounds(request) == 4
    assert attained_s(request) == pytest.approx(0.02 * 5)  # the prefill and four rounds


def test_demotion_by_attained_service_and_who_may_be_displaced() -> None:
    policy = make_policy("laps-sd:queues=3;s1_s=0.1;multiplier=2;gamma=50")
    assert isinstance(policy, LapsSD)
    old, new = _request("old"), _request("new", arrival=1.0)
    assert policy.queue(old) == 0
    _serve(policy, old, [2, 2, 2, 2], 0.03)  # 5 steps of 30 ms: 0.15 s of service
    assert policy.queue(old) == 1
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=1), policy)
    assert policy.victims_for(new, [old], scheduler, 1.0) == [old]  # Q1 beats a non-perceptible Q2
    peer = _request("peer")
    _serve(policy, peer, [2, 2, 2, 2], 0.03)
    assert policy.victims_for(peer, [old], scheduler, 1.0) == []  # same queue, both non-perceptible: FCFS
    _serve(policy, old, [2] * 10, 0.03, start_s=5.0)  # 0.48 s in all: the last queue
    assert policy.queue(old) == 2


def test_a_perceptible_request_is_preempted_only_in_the_round_it_became_perceptible() -> None:
    policy = make_policy("laps-sd:queues=3;s1_s=0.1;gamma=2;delta=0.2;draft_tokens=5")
    assert isinstance(policy, LapsSD)
    long = _request("long", 5000, predicted=5000)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=1), policy)
    _serve(policy, long, [6, 6], 0.03)  # rates 1, 1: perceptible now, perceived ~ 5000/6 rounds: last queue
    assert policy.perceptible(long) and policy.queue(long) == 2
    newcomer = _request("newcomer", arrival=0.5)
    assert policy.victims_for(newcomer, [long], scheduler, 0.5) == [long]  # its decision point
    _serve(policy, long, [6], 0.03, start_s=1.0)  # it ran another round: no longer preemptible
    assert policy.victims_for(newcomer, [long], scheduler, 1.1) == []
    assert policy.preemption_mode(long, scheduler) is PreemptionMode.SWAP


def test_perceptible_requests_come_first_in_their_queue_shortest_estimate_first() -> None:
    policy = make_policy("laps-sd:queues=2;s1_s=100;gamma=2;delta=0.2;draft_tokens=5")
    assert isinstance(policy, LapsSD)
    short, long, unknown = _request("s", 500, predicted=60), _request("l", 500, predicted=400), _request("u")
    for request in (short, long):
        _serve(policy, request, [6, 6], 0.03)
    keys = sorted([(policy.waiting_key(r, 0.0), r.request_id) for r in (unknown, long, short)])
    assert [rid for _, rid in keys] == ["s", "l", "u"]


def test_tiers_put_priority_first_and_displace_any_less_important_request() -> None:
    policy = make_policy("laps-sd:tiers=true;gamma=2;delta=0.2;draft_tokens=5")
    assert isinstance(policy, LapsSD)
    background = _request("bg", 5000, priority=3, predicted=5000)
    _serve(policy, background, [6, 6, 6], 0.03)
    assert policy.perceptible(background)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=1), policy)
    urgent = _request("urgent", priority=0, arrival=1.0)
    assert policy.victims_for(urgent, [background], scheduler, 1.0) == [background]
    assert policy.waiting_key(urgent, 1.0) < policy.waiting_key(background, 1.0)
    plain = make_policy("laps-sd:gamma=2;delta=0.2;draft_tokens=5")
    assert isinstance(plain, LapsSD)
    _serve(plain, background, [6], 0.03, start_s=2.0)
    assert plain.victims_for(urgent, [background], scheduler, 3.0) == []


def test_las_displaces_only_past_a_quantum_of_extra_service() -> None:
    policy = make_policy("las:quantum_s=0.1")
    assert isinstance(policy, LAS)
    running, fresh = _request("running"), _request("fresh", arrival=1.0)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=1), policy)
    _serve(policy, running, [1, 1], 0.03)  # 0.09 s
    assert policy.victims_for(fresh, [running], scheduler, 1.0) == []
    _serve(policy, running, [1], 0.03, start_s=2.0)  # 0.15 s
    assert policy.victims_for(fresh, [running], scheduler, 2.0) == [running]
    assert policy.waiting_key(fresh, 2.0) < policy.waiting_key(running, 2.0)
    textbook = make_policy("las:quantum_s=0")
    other = _request("other")
    _serve(textbook, other, [], 0.01)
    assert textbook.victims_for(fresh, [other], scheduler, 2.0) == [other]


def test_lp_sjf_serves_the_shortest_predicted_output_first_whatever_its_acceptance() -> None:
    requests = [_request("a", 300, predicted=300), _request("b", 100, predicted=50, arrival=0.1),
                _request("c", 200, predicted=120, arrival=0.2)]
    order = service_order("lp-sjf", requests)
    assert order[1:] == ["b", "c"]  # a started first, alone; then by predicted length


@pytest.mark.parametrize("spec, message", [
    ("laps-sd:queues=0", "queues"), ("laps-sd:multiplier=0.5", "multiplier"), ("laps-sd:gamma=0", "gamma"),
    ("laps-sd:delta=2", "delta"), ("laps-sd:t_ssm_s=0.01", "give both"), ("las:quantum_s=-1", "quantum_s"),
])
def test_bad_parameters_are_named(spec: str, message: str) -> None:
    with pytest.raises(Exception, match=message):
        make_policy(spec)


def test_order_predicted_ranks_every_request_of_a_queue_by_estimated_remaining_seconds() -> None:
    policy = make_policy("laps-sd:order=predicted;queues=2;s1_s=100;gamma=2;delta=0.2;draft_tokens=5")
    assert isinstance(policy, LapsSD)
    seen = _request("seen", 500, predicted=300)
    _serve(policy, seen, [3, 3], 0.03)  # 0.01 s per token measured; rates 0.4 and 0.4
    assert policy.perceptible(seen)  # two equal rates: stable
    short, long = _request("short", 500, predicted=20), _request("long", 500, predicted=900)
    # unstarted requests are priced at the mean cost per token seen so far: 0.06 s / 6 tokens
    assert policy.predicted_remaining_s(short) == pytest.approx(20 * 0.01)
    assert policy.predicted_remaining_s(long) == pytest.approx(900 * 0.01)
    keys = sorted((policy.waiting_key(r, 0.0), r.request_id) for r in (long, seen, short))
    assert [rid for _, rid in keys] == ["short", "seen", "long"]
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=1), policy)
    fresh_long = _request("fresh-long", 500, predicted=900)
    _serve(policy, fresh_long, [3], 0.03)
    assert policy.victims_for(short, [fresh_long], scheduler, 1.0) == []  # one queue: no displacement
    assert policy.perceptible(seen)
    assert policy.victims_for(short, [seen], scheduler, 1.0) == []  # nor in its round of perception


def test_las_victims_are_the_served_requests_by_victim_key_descending_ties_in_running_order() -> None:
    """``victims_for`` decorates each victim with its key and place: the stable sort of the filtered list."""
    rng = random.Random(9)
    for quantum in ("0", "0.5"):
        policy = make_policy(f"las:quantum_s={quantum}")
        assert isinstance(policy, LAS)
        scheduler = Scheduler(SchedulerConfig(max_num_seqs=1), policy)
        for trial in range(200):
            running = [_request(f"r{i}", arrival=float(rng.randint(0, 3))) for i in range(rng.randint(0, 12))]
            for request in running:
                if rng.random() < 0.9:  # (a few have never been served)
                    request.service_s = rng.choice([0.0, 0.5, 1.0, 1.5, 2.0])
            candidate = _request("c", arrival=2.0)
            candidate.service_s = rng.choice([0.0, 0.5, 1.0])
            limit = attained_s(candidate) + policy.config.quantum_s
            served = [r for r in running if attained_s(r) >= limit and attained_s(r) > attained_s(candidate)]
            expected = sorted(served, key=policy.victim_key, reverse=True)
            assert policy.victims_for(candidate, running, scheduler, 0.0) == expected, trial


@pytest.mark.parametrize("spec", ["laps-sd", "laps-sd:multiplier=1;queues=4", "laps-sd:queues=1",
                                  "laps-sd:tiers=true;t_ssm_s=0.001;t_llm_s=0.02", "laps-sd:multiplier=1.0001"])
def test_laps_keys_place_requests_in_the_queue_of_their_service(spec: str) -> None:
    """The bisection and the inlined service give :func:`queue_of` of ``max(attained, perceived)``."""
    policy = make_policy(spec)
    assert isinstance(policy, LapsSD)
    rng = random.Random(3)
    services = [0.0, *policy.bounds, *(b * (1 - 1e-16) for b in policy.bounds), 1e9, *(rng.uniform(0, 40)
                for _ in range(200))]
    for service in services:
        assert policy._queue_of(service) == queue_of(service, policy.bounds)
        request = _request("r", 1000, priority=rng.randint(0, 3), predicted=rng.choice([None, 50, 900]))
        request.service_s = service
        if rng.random() < 0.5:  # perceptible: eq. 6 from its rounds so far
            state = request.policy_state
            state["laps.perceptible"], state["laps.rate"] = 1.0, rng.random()
            request.service_rounds, request.round_service_s = rng.randint(1, 50), rng.uniform(0, 2)
        perceptible = policy.perceptible(request)
        service_s = max(service, (policy.estimated_time_s(request) or 0.0) if perceptible else 0.0)
        key = (0 if perceptible else 1, queue_of(service_s, policy.bounds), request.arrival_time_s)
        assert policy.queue(request) == key[1]
        assert policy.victim_key(request) == ((request.priority, *key) if policy.config.tiers else key)


def _victims_by_full_keys(policy: LapsSD, candidate: Request, running: list[Request]) -> list[Request]:
    """``victims_for`` as written first: every request's whole ``_laps_key``."""
    mine = policy._laps_key(candidate)
    victims = []
    for request in running:
        if policy.config.tiers and request.priority != candidate.priority:
            if request.priority > candidate.priority:
                victims.append(request)
            continue
        if policy.perceptible(request):
            fresh = request.policy_state.get("laps.fresh", 0.0) == 1.0 and policy.config.order == "fcfs"
            if fresh and mine < policy._laps_key(request):
                victims.append(request)
            continue
        theirs = policy._laps_key(request)
        if mine[0] < theirs[0] or (mine[0] == theirs[0] and policy._ranks_first_in_queue(candidate)):
            victims.append(request)
    return sorted(victims, key=lambda r: policy.waiting_key(r, 0.0), reverse=True)


@pytest.mark.parametrize("spec", ["laps-sd:s1_s=0.5", "laps-sd:order=predicted;tiers=true;s1_s=0.5",
                                  "laps-sd:tiers=true;s1_s=0.5", "laps-sd:multiplier=1;queues=4;s1_s=0.5",
                                  "laps-sd:queues=1"])
def test_laps_victims_match_the_comparison_of_whole_keys(spec: str) -> None:
    policy = make_policy(spec)
    assert isinstance(policy, LapsSD)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=1), policy)
    rng = random.Random(11)

    def served(rid: str) -> Request:
        request = _request(rid, 1000, arrival=float(rng.randint(0, 3)), priority=rng.randint(0, 2),
                           predicted=rng.choice([None, 40, 800]))
        state = request.policy_state
        request.service_s = rng.choice([0.0, 0.3, 0.7, 1.5, 5.0, *policy.bounds])  # (a bound: the next queue's)
        if rng.random() < 0.7:
            request.service_rounds, request.round_service_s, request.round_tokens = rng.randint(1, 9), 0.2, 12
        if request.service_rounds and rng.random() < 0.5:
            state["laps.perceptible"], state["laps.rate"] = 1.0, rng.choice([0.2, 0.8])
            state["laps.fresh"] = rng.choice([0.0, 1.0])
        return request

    for trial in range(300):
        running = [served(f"r{i}") for i in range(rng.randint(0, 10))]
        candidate = served("c")
        expected = _victims_by_full_keys(policy, candidate, running)
        assert policy.victims_for(candidate, running, scheduler, 0.0) == expected, trial


class _CheckedLapsSD(LapsSD):
    """``laps-sd`` whose every ``victims_for`` is held to :func:`_victims_by_full_keys` (the settled set left out),
    counting the calls in which that set passed over a running request."""

    name: ClassVar[str] = "test-laps-checked"
    calls: ClassVar[list[int]] = [0, 0]  # (calls, calls in which a settled request was passed over)

    def victims_for(
        self, candidate: Request, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        named = list(super().victims_for(candidate, running, view, now_s))
        assert named == _victims_by_full_keys(self, candidate, list(running)), (candidate.request_id, now_s)
        _CheckedLapsSD.calls[0] += 1
        _CheckedLapsSD.calls[1] += any(r in self._settled for r in running)
        return named


@pytest.fixture(scope="module")
def _checked_laps() -> Iterator[None]:
    register_policy(_CheckedLapsSD)
    yield
    POLICIES.unregister(_CheckedLapsSD.name)


@pytest.mark.usefixtures("_checked_laps")
@pytest.mark.parametrize("options", ["", ":tiers=true", ":order=predicted", ":order=predicted;tiers=true"])
def test_the_settled_requests_victims_for_passes_over_are_those_the_whole_keys_never_name(options: str) -> None:
    """``victims_for`` skips the running requests it has seen settle (perceptible, past their first round as
    such): through preemptions (swap and recompute), speculative rounds and fast-forwarded stretches, what it
    names is what comparing every request's whole key names, and nothing it keeps outlives its request."""
    _CheckedLapsSD.calls[:] = [0, 0]
    scenarios = [s for s in SCENARIOS if s.name in ("speculative", "kv-exhaustion", "kv-exhaustion-swap")]
    for scenario in scenarios:
        simulation = build_simulation(f"{_CheckedLapsSD.name}{options}", scenario.cluster)
        requests = scenario.requests()
        simulation.run(requests)
        for instance in simulation.instances:
            policy = instance.scheduler.policy
            assert isinstance(policy, LapsSD)
            assert not any(r.state is RequestState.FINISHED for r in policy._settled)
    calls, passed_over = _CheckedLapsSD.calls
    assert calls and passed_over, (calls, passed_over)  # (the set was used, so the comparison tested it)
