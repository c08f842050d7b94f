"""Tests for PD disaggregation: semsched/sim/disagg.py, the hand-off in semsched/sim/engine.py and the two
scheduler methods it uses (``Scheduler.hand_off``, ``Scheduler.add_transferred``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest

from semsched.core.kv import blocks_for
from semsched.core.plan import StepResult
from semsched.core.request import InvalidRequestError, Request, RequestState
from semsched.latency import load_profile
from semsched.latency.preemption import KNOWN_SHAPES
from semsched.sim.disagg import DisaggregationError, KVLink, PDSpec
from semsched.sim.engine import Instance, SimResult, Simulation
from semsched.sim.router import InstanceView, make_router
from semsched.sim.runner import ClusterSpec, run_policy
from semsched.workloads import build_workload
from tests.support import check_kv, make_request, make_scheduler, random_requests

PROFILE = "a100-qwen1.5-4b"


def _pd_simulation(
    router: object, *, prefill: int = 2, decode: int = 2, fast_forward: bool = True, link_gbps: float = 25.0,
    policy: str = "fcfs", **config: object,
) -> Simulation:
    latency = load_profile(PROFILE)
    instances = [Instance(make_scheduler(policy, **config), latency) for _ in range(prefill + decode)]
    split = PDSpec(prefill, decode, kv_link_gbps=link_gbps).disaggregation()
    return Simulation(instances, router, fast_forward=fast_forward, disaggregation=split)  # type: ignore[arg-type]


class _Recorder:
    """Round-robin over the prefill pool; records where each first token and each end came from."""

    name: ClassVar[str] = "test-pd-recorder"

    def __init__(self) -> None:
        self.next = 0
        self.first_tokens: dict[str, tuple[str, int, float]] = {}
        self.finishes: dict[str, tuple[str, int]] = {}
        self.decode_choices: list[tuple[str, tuple[int, ...]]] = []

    def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        assert all(view.role == "prefill" for view in instances)
        self.next += 1
        return (self.next - 1) % len(instances)

    def route_decode(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        assert all(view.role == "decode" for view in instances)
        free = tuple(view.num_free_gpu_blocks for view in instances)
        self.decode_choices.append((request.request_id, free))
        return max(range(len(instances)), key=lambda i: (free[i], -i))

    def on_first_token(self, request: Request, instance: InstanceView, now_s: float) -> None:
        self.first_tokens[request.request_id] = (instance.role, instance.index, now_s)

    def on_finish(self, request: Request, instance: InstanceView, now_s: float) -> None:
        self.finishes[request.request_id] = (instance.role, instance.index)


# ---- the scheduler's two methods ----------------------------------------------------------------------------
def test_a_hand_off_frees_every_block_and_the_decode_side_allocates_the_whole_sequence_at_admission() -> None:
    block_size = 16
    prefill = make_scheduler("fcfs", num_gpu_blocks=64, block_size=block_size, watermark=0.0)
    decode = make_scheduler("fcfs", num_gpu_blocks=64, block_size=block_size, watermark=0.0)
    request = make_request("r", prompt=40, output=20)
    prefill.add_request(request, 0.0)
    plan = prefill.schedule(0.0)
    prefill.update(plan, StepResult(0.1))
    assert request.num_output_tokens == 1 and prefill.kv.gpu_blocks_of(request) == blocks_for(40, block_size)
    assert prefill.hand_off("r") is request
    assert prefill.kv.num_free_gpu_blocks == 64 and prefill.kv.gpu_blocks_of(request) == 0
    assert not prefill.has_unfinished() and request.state is RequestState.WAITING
    check_kv(prefill)

    assert decode.add_transferred(request, 0.2).accepted
    plan = decode.schedule(0.2)
    assert plan.decode == [request] and not plan.prefill  # a decode: the prompt is never recomputed
    assert decode.kv.gpu_blocks_of(request) == blocks_for(request.prompt_tokens + request.num_output_tokens,
                                                           block_size)
    now_s = 0.2
    while request.state is RequestState.RUNNING:
        now_s += 0.01
        decode.update(plan, StepResult(now_s))
        check_kv(decode)
        if request.state is RequestState.RUNNING:
            assert decode.kv.gpu_blocks_of(request) == blocks_for(request.num_computed_tokens, block_size)
            plan = decode.schedule(now_s)  # the next decode's slot
            assert decode.kv.gpu_blocks_of(request) == blocks_for(request.num_tokens, block_size)
    assert request.state is RequestState.FINISHED and request.num_output_tokens == 20
    assert decode.kv.num_free_gpu_blocks == 64


def test_the_two_methods_refuse_requests_in_the_wrong_place() -> None:
    scheduler = make_scheduler()
    fresh = make_request("fresh")
    with pytest.raises(InvalidRequestError, match="add_transferred: request 'fresh' must arrive"):
        scheduler.add_transferred(fresh, 0.0)
    scheduler.add_request(fresh, 0.0)  # waiting, not running
    with pytest.raises(InvalidRequestError, match="hand_off: request 'fresh' is not running"):
        scheduler.hand_off("fresh")
    with pytest.raises(InvalidRequestError, match="hand_off: request 'nobody'"):
        scheduler.hand_off("nobody")


# ---- the simulated cluster ----------------------------------------------------------------------------------
def _run_pd(fast_forward: bool, **config: object) -> tuple[SimResult, list[Request], Simulation, _Recorder]:
    requests = random_requests(11, 250, rate=30.0, with_slos=True)
    router = _Recorder()
    simulation = _pd_simulation(router, fast_forward=fast_forward, **config)
    return simulation.run(requests), requests, simulation, router


def test_pd_conserves_kv_blocks_loses_nothing_and_both_fast_forward_modes_agree() -> None:
    # few decode blocks: transferred requests wait and are preempted on the decode instances
    config = {"num_gpu_blocks": 160, "num_cpu_blocks": 40, "block_size": 16}
    fast, fast_reqs, fast_sim, _ = _run_pd(True, **config)
    slow, slow_reqs, slow_sim, _ = _run_pd(False, **config)
    for requests, simulation in ((fast_reqs, fast_sim), (slow_reqs, slow_sim)):
        assert all(r.state.is_terminal for r in requests)
        finished = [r for r in requests if r.state is RequestState.FINISHED]
        assert all(r.num_output_tokens == r.target_output_tokens for r in finished)
        for instance in simulation.instances:
            check_kv(instance.scheduler)
            assert instance.scheduler.kv.num_free_gpu_blocks == instance.scheduler.kv.num_gpu_blocks
            assert not instance.scheduler.has_unfinished()
    assert sum(r.num_preemptions for r in fast_reqs) > 0  # the decode side was under pressure
    assert [r.token_times_s().tolist() for r in fast_reqs] == [r.token_times_s().tolist() for r in slow_reqs]
    assert [r.num_preemptions for r in fast_reqs] == [r.num_preemptions for r in slow_reqs]
    assert [r.state for r in fast_reqs] == [r.state for r in slow_reqs]
    assert fast.num_steps == slow.num_steps and fast.num_events < slow.num_events  # it did fast-forward


def test_a_requests_first_token_comes_from_its_prefill_instance_and_the_second_after_the_transfer() -> None:
    _, requests, simulation, router = _run_pd(True)
    assert simulation.disaggregation is not None
    link = simulation.disaggregation.link
    assert link == KVLink(KNOWN_SHAPES["qwen1.5-4b"].kv_bytes_per_token, 25.0)
    # every instance shares one timeline, so every request's step indices read one array
    assert len({id(i.scheduler.timeline) for i in simulation.instances}) == 1
    for request in requests:
        times = request.token_times_s()
        assert len(times) == request.target_output_tokens
        assert (times[1:] > times[:-1]).all()
        role, _, first_s = router.first_tokens[request.request_id]
        assert role == "prefill" and first_s == times[0] == request.first_token_time_s
        if len(times) > 1:
            assert times[1] >= times[0] + link.transfer_time_s(request.prompt_tokens)
            assert router.finishes[request.request_id][0] == "decode"
        else:  # finished with its first token: never transferred
            assert router.finishes[request.request_id][0] == "prefill"
    transferred = {request_id for request_id, _ in router.decode_choices}
    assert transferred == {r.request_id for r in requests if r.target_output_tokens > 1}


def test_a_slower_link_delays_every_second_token_by_the_transfer_time() -> None:
    def second_minus_first(link_gbps: float) -> float:
        request = make_request("r", prompt=500, output=3)
        _pd_simulation(_Recorder(), prefill=1, decode=1, link_gbps=link_gbps).run([request])
        times = request.token_times_s()
        return float(times[1] - times[0])

    bytes_ = 500 * KNOWN_SHAPES["qwen1.5-4b"].kv_bytes_per_token
    fast, slow = second_minus_first(100.0), second_minus_first(1.0)
    assert slow - fast == pytest.approx(bytes_ / 1e9 - bytes_ / 100e9)


def test_the_default_decode_choice_is_the_most_free_blocks() -> None:
    class PrefillOnly:
        name: ClassVar[str] = "test-prefill-only"

        def route(self, request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
            return 0

    requests = [make_request(str(i), prompt=64, output=200, arrival=0.05 * i) for i in range(6)]
    simulation = _pd_simulation(PrefillOnly(), prefill=1, decode=3, num_gpu_blocks=200)
    seen: list[int] = []
    original = simulation._route_decode

    def spy(request: Request, instances: Sequence[InstanceView], now_s: float) -> int:
        choice = original(request, instances, now_s)
        assert instances[choice].num_free_gpu_blocks == max(v.num_free_gpu_blocks for v in instances)
        seen.append(choice)
        return choice

    simulation._route_decode = spy
    simulation.run(requests)
    assert seen[:3] == [0, 1, 2]  # each takes the emptiest; ties go to the lowest index


def test_a_pd_cluster_runs_through_the_runner_with_each_router_and_both_modes_agree() -> None:
    workload = build_workload("azure-conv", rate_per_s=6.0, duration_s=20.0, seed=3)
    for router in ("round-robin", "min-load", "go-routing", "min-load:load=tokens"):
        cluster = ClusterSpec(profile=PROFILE, router=router, pd=PDSpec(2, 2))
        fast = run_policy(workload, "fcfs", cluster)
        slow = run_policy(workload, "fcfs", cluster, fast_forward=False)
        assert [r.token_times_s().tolist() for r in fast.requests] == [
            r.token_times_s().tolist() for r in slow.requests
        ]
        assert fast.summary.to_dict() == slow.summary.to_dict()
        assert all(r.state is RequestState.FINISHED for r in fast.requests)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_prefill_instances": 0, "num_decode_instances": 1}, r"pd.num_prefill_instances: must be an integer "
         r"from 1 to 1,024 \(got 0\)"),
        ({"num_prefill_instances": 1, "num_decode_instances": 2000}, r"pd.num_decode_instances: .* \(got 2000\)"),
        ({"num_prefill_instances": 1, "num_decode_instances": 1, "kv_link_gbps": 0.0},
         r"pd.kv_link_gbps: must be a number > 0 and <= 100,000 GB/s \(got 0.0\)"),
        ({"num_prefill_instances": 1, "num_decode_instances": 1, "kv_link_gbps": float("nan")}, "pd.kv_link_gbps"),
        ({"num_prefill_instances": 1, "num_decode_instances": 1, "model_shape": "gpt-5"},
         r"pd.model_shape: unknown model 'gpt-5'; known: llama-3-70b"),
    ],
)
def test_a_bad_pd_setting_names_its_field_and_limit(fields: dict[str, object], message: str) -> None:
    with pytest.raises(DisaggregationError, match=message):
        PDSpec(**fields)  # type: ignore[arg-type]


def test_a_pd_cluster_spec_leaves_num_instances_alone_and_co_located_clusters_are_unchanged() -> None:
    with pytest.raises(ValueError, match=r"num_instances: leave it at 1 with pd .* = 3 instances; got 2"):
        ClusterSpec(num_instances=2, pd=PDSpec(1, 2))
    assert ClusterSpec(num_instances=3).pd is None
    latency = load_profile(PROFILE)
    with pytest.raises(ValueError, match=r"disaggregation.num_prefill: must be from 1 to 1"):
        Simulation([Instance(make_scheduler(), latency) for _ in range(2)], make_router("round-robin"),
                   disaggregation=PDSpec(2, 1).disaggregation())


@pytest.mark.parametrize("policy", ["priority-preempt:mode=swap", "edf:preempt=true", "srpt", "sjf"])
def test_pd_fast_forward_is_exact_for_preemptive_policies(policy: str) -> None:
    runs = []
    for fast_forward in (True, False):
        requests = random_requests(5, 200, rate=25.0, with_slos=True)
        simulation = _pd_simulation(
            make_router("min-load:load=tokens"), prefill=1, decode=2, fast_forward=fast_forward, policy=policy,
            num_gpu_blocks=150, num_cpu_blocks=60,
        )
        result = simulation.run(requests)
        times = [r.token_times_s().tolist() for r in requests]
        runs.append((result, times, [r.num_preemptions for r in requests]))
    (fast, fast_times, fast_preempted), (slow, slow_times, slow_preempted) = runs
    assert fast_times == slow_times and fast_preempted == slow_preempted
    assert fast.monitor.queue_samples == slow.monitor.queue_samples
    assert fast.monitor.preemptions == slow.monitor.preemptions
    assert fast.num_events < slow.num_events
