"""SlideBatching (seed 001, Algorithm 1): the time budget, the sliding URGENT/NORMAL boundary, and the plan as the
engine runs it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.errors import SemschedError
from semsched.core.plan import BatchPlan, StepResult
from semsched.core.policy import StepBudget
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import SchedulerConfig
from semsched.latency import load_profile
from semsched.metrics import TDGWeights
from semsched.policies import make_policy
from semsched.policies.registry import PolicyError
from semsched.policies.slide_batching import SlideBatching
from semsched.sim.disagg import PDSpec
from semsched.sim.engine import Instance, Simulation
from semsched.sim.router import make_router
from semsched.sim.runner import ClusterSpec, build_simulation, run_policy
from semsched.sim.speed import SpeedTrace
from semsched.workloads import build_workload
from semsched.workloads.traces import data_dir
from tests.support import check_kv, check_plan, make_scheduler


def _request(i: int, *, prompt: int = 200, output: int = 20, arrival: float = 0.0, ttft: float = 2.0,
             tpot: float = 0.1, priority: int = 0) -> Request:
    return Request(f"r{i}", prompt_tokens=prompt, max_output_tokens=output, output_tokens=output,
                   arrival_time_s=arrival, ttft_slo_s=ttft, tpot_slo_s=tpot, priority=priority)


def _policy(spec: str = "slide-batching") -> SlideBatching:
    policy = make_policy(spec)
    assert isinstance(policy, SlideBatching)
    return policy


def _planned(policy: SlideBatching, requests: list[Request], now_s: float) -> list[str]:
    for request in requests:
        policy.on_arrival(request, request.arrival_time_s)
    plan = policy.plan(now_s)
    return sorted(plan.rank, key=plan.rank.__getitem__)


def test_low_load_is_deadline_first() -> None:
    """A few requests with room to spare: nobody is URGENT and the queue is in deadline order."""
    policy = _policy()
    requests = [_request(i, arrival=0.1 * i, ttft=5.0 - 0.5 * i, priority=i % 2) for i in range(4)]
    order = _planned(policy, requests, now_s=0.5)
    plan = policy.plan(0.5)
    assert plan.num_urgent == 0
    assert order == [r.request_id for r in sorted(requests, key=lambda r: r.ttft_deadline_s)]


def test_very_high_load_is_density_first() -> None:
    """Far more prompt work than any deadline allows: everything is URGENT, ordered by gain per second."""
    policy = _policy("slide-batching:first_token_weight=1.0")
    requests = [_request(i, prompt=300 + 97 * (i % 7), ttft=0.5, priority=i % 2) for i in range(60)]
    order = _planned(policy, requests, now_s=0.0)
    plan = policy.plan(0.0)
    assert plan.num_urgent == len(requests)
    estimator = policy.estimator
    density = {r.request_id: policy.priority_weight(r.priority) / estimator.chunk_time_s(r.prompt_tokens, 0)
               for r in requests}
    assert [density[i] for i in order] == sorted(density.values(), reverse=True)


def test_boundary_slides_with_load() -> None:
    """The URGENT share grows with the queue (same deadlines, more work)."""
    counts = []
    for size in (2, 20, 80):
        policy = _policy()
        _planned(policy, [_request(i, prompt=400, ttft=1.5) for i in range(size)], now_s=0.0)
        counts.append(policy.plan(0.0).num_urgent / size)
    assert counts[0] <= counts[1] <= counts[2]
    assert counts[0] < counts[2]


@pytest.mark.parametrize(("order", "urgent"), [("deadline", 0), ("density", 30)])
def test_ablations_fix_the_partition(order: str, urgent: int) -> None:
    policy = _policy(f"slide-batching:order={order}")
    _planned(policy, [_request(i, prompt=500, ttft=0.3 + 0.01 * i) for i in range(30)], now_s=0.0)
    assert policy.plan(0.0).num_urgent == urgent


def _planned_s(policy: SlideBatching, plan: BatchPlan) -> float:
    """The estimator's price of the batch the engine actually formed."""
    estimator = policy.estimator
    prefill = sum(estimator.chunk_time_s(c.num_tokens, c.context_tokens) for c in plan.prefill)
    decode = sum(estimator.decode_time_s(r.num_computed_tokens) for r in plan.decode)
    return estimator.t_c + prefill + decode


@settings(max_examples=25, deadline=None)
@given(
    prompts=st.lists(st.integers(16, 1500), min_size=1, max_size=40),
    outputs=st.lists(st.integers(1, 40), min_size=40, max_size=40),
    gap_ms=st.integers(0, 200),
    ttft_ms=st.integers(100, 3000),
    eta_ms=st.sampled_from([5.0, 25.0, 100.0]),
)
def test_batches_stay_within_the_time_budget(prompts: list[int], outputs: list[int], gap_ms: int, ttft_ms: int,
                                             eta_ms: float) -> None:
    """Every batch the engine forms under slide-batching costs (by the policy's own estimator) no more than the
    step's time budget, t_budget = max(min remain, η); the only exception is the progress rule, a single request
    when nothing fits."""
    scheduler = make_scheduler(f"slide-batching:eta_ms={eta_ms};correction=false", block_size=16,
                               num_gpu_blocks=2000, watermark=0.0)
    policy = scheduler.policy
    assert isinstance(policy, SlideBatching)
    requests = [_request(i, prompt=p, output=outputs[i], arrival=i * gap_ms / 1e3, ttft=ttft_ms / 1e3,
                         priority=i % 2) for i, p in enumerate(prompts)]
    pending, now, steps = sorted(requests, key=lambda r: r.arrival_time_s), 0.0, 0
    while pending or scheduler.has_unfinished():
        while pending and pending[0].arrival_time_s <= now:
            scheduler.add_request(pending.pop(0), now)
        plan = scheduler.schedule(now)
        check_plan(scheduler, plan)
        check_kv(scheduler)
        if plan.is_empty:
            now = pending[0].arrival_time_s if pending else now
            continue
        slide = policy.plan(now)
        assert slide.budget_s >= eta_ms / 1e3
        if len(plan.requests()) > 1:
            assert _planned_s(policy, plan) <= slide.budget_s + 1e-12
        chosen = dict(slide.chosen)
        for chunk in plan.prefill:
            assert chunk.num_tokens <= chosen[chunk.request.request_id]
        assert all(r.request_id in chosen for r in plan.decode)
        now += 0.02
        scheduler.update(plan, StepResult(end_time_s=now))
        steps += 1
        assert steps < 20_000
    assert all(r.state.is_terminal for r in requests)


def test_correction_follows_a_slower_machine() -> None:
    """The engine runs 1.5x slower than the profile the policy estimates with: the correction factor moves
    from 1 to about 1.5 (fed by the core's ``on_step`` callback with the steps really run)."""
    requests = [_request(i, prompt=300, output=30, arrival=0.05 * i, ttft=3.0) for i in range(60)]
    profile = "a100-qwen1.5-7b-batch"
    scheduler = make_scheduler(f"slide-batching:profile={profile}")
    policy = scheduler.policy
    assert isinstance(policy, SlideBatching)
    instance = Instance(scheduler, load_profile(profile), speed=SpeedTrace(60.0, (1.5,)))
    result = Simulation([instance], make_router("round-robin")).run(requests)
    assert all(r.state.is_terminal for r in result.requests)
    assert policy.estimator.beta == pytest.approx(1.5, rel=0.02)
    uncorrected = make_policy(f"slide-batching:profile={profile};correction=false")
    assert isinstance(uncorrected, SlideBatching)
    assert uncorrected.estimator.beta == 1.0


def test_bad_configuration_names_the_field() -> None:
    with pytest.raises(PolicyError, match="eta_ms"):
        make_policy("slide-batching:eta_ms=-1")
    with pytest.raises(PolicyError, match="priority_weights"):
        make_policy("slide-batching:priority_weights=2/-1")
    with pytest.raises(SemschedError, match="unknown latency profile"):
        make_policy("slide-batching:profile=no-such-profile")


def test_an_analytic_profile_is_fitted_to_the_batch_model() -> None:
    """Given the engine's analytic profile, the estimator starts from eq. 4-7 fitted to it (close, not equal)."""
    policy = _policy("slide-batching:profile=a100-qwen1.5-4b")
    analytic = load_profile("a100-qwen1.5-4b")
    for prefill, decodes, context in (([(512, 0)], 0, 0), ([], 64, 64 * 800), ([(256, 256)], 16, 16 * 300)):
        exact = analytic.step_time_s(prefill, decodes, context)
        assert policy.estimator.step_time_s(prefill, decodes, context) == pytest.approx(exact, rel=0.5)


def test_no_deadlines_means_no_time_limit() -> None:
    policy = _policy()
    requests = [Request(f"r{i}", prompt_tokens=100, max_output_tokens=5, arrival_time_s=0.0) for i in range(3)]
    for request in requests:
        policy.on_arrival(request, 0.0)
    plan = policy.plan(0.0)
    assert math.isinf(plan.budget_s)
    assert plan.num_urgent == 0
    assert len(plan.chosen) == 3


def test_eta_defaults_to_the_smallest_tpot_slo() -> None:
    """A token already late makes min remain negative: the budget is then η, by default the tightest TPOT SLO."""
    policy = _policy()
    late = _request(0, arrival=0.0, ttft=0.1, tpot=0.07)
    other = _request(1, arrival=0.0, ttft=5.0, tpot=0.2)
    _planned(policy, [late, other], now_s=1.0)
    assert policy.plan(1.0).budget_s == pytest.approx(0.07)
    configured = _policy("slide-batching:eta_ms=40")
    _planned(configured, [_request(0, ttft=0.1, tpot=0.07)], now_s=1.0)
    assert configured.plan(1.0).budget_s == pytest.approx(0.04)


def test_runs_on_both_pools_of_a_pd_cluster() -> None:
    """A request handed off to a decode instance leaves the prefill instance's plan (``on_leave``): every request
    finishes once, on the instance that holds it."""
    requests = [_request(i, prompt=200 + 10 * i, output=5 + i % 7, arrival=0.02 * i, ttft=1.0, priority=i % 2)
                for i in range(40)]
    cluster = ClusterSpec(profile="a100-qwen1.5-7b", router="go-routing",
                          pd=PDSpec(2, 1, model_shape="qwen1.5-7b"))
    simulation = build_simulation("slide-batching:phi=prefill", cluster)
    result = simulation.run(requests)
    assert all(r.state is RequestState.FINISHED for r in result.requests)
    assert all(r.num_output_tokens == r.target_output_tokens for r in result.requests)


class _View:
    """The engine as a plan sees it: free blocks (watermark included) and sequence slots."""

    def __init__(self, free_blocks: int, *, max_num_seqs: int = 256, block_size: int = 16) -> None:
        self.free_blocks, self.block_size = free_blocks, block_size
        self.budget = StepBudget(2048, max_num_seqs)

    def available_blocks(self, request: Request, *, admission: bool) -> int:
        return self.free_blocks


def _started(request: Request, computed: int) -> Request:
    request.state = RequestState.RUNNING
    request.num_computed_tokens = computed
    return request


def test_a_prompt_starts_only_if_its_whole_sequence_fits_beside_the_started_prompts() -> None:
    """A prompt half computed holds its blocks and needs more to finish: a new prompt whose whole sequence does
    not fit in what is left is not planned (it would strand both), one that fits is."""
    half = _started(_request(0, prompt=1600, output=10, ttft=0.1), computed=800)  # 50 held, 51 more to finish
    big = _request(1, prompt=1000, output=10, ttft=0.1)  # 64 blocks whole
    small = _request(2, prompt=300, output=10, ttft=0.1)  # 20 blocks whole
    policy = _policy("slide-batching:max_budget_ms=100000;eta_ms=100000")
    _planned(policy, [half, big, small], now_s=1.0)
    plan = policy.plan(2.0, StepBudget(4096, 256), _View(free_blocks=51 + 40))
    chosen = {request_id for request_id, _ in plan.chosen}
    assert chosen == {"r0", "r2"}
    roomy = _policy("slide-batching:max_budget_ms=100000;eta_ms=100000")
    _planned(roomy, [half, big, small], now_s=1.0)
    plan = roomy.plan(2.0, StepBudget(4096, 256), _View(free_blocks=51 + 64 + 20))
    assert {request_id for request_id, _ in plan.chosen} == {"r0", "r1", "r2"}


def test_a_waiting_request_is_not_planned_without_a_sequence_slot() -> None:
    """Running requests keep their slots whether or not the plan serves them: with every slot taken, the plan
    serves the running requests, not waiting ones the engine could not admit (an empty step, and a stall)."""
    running = [_started(_request(i, prompt=100, output=10, ttft=50.0), computed=100) for i in range(2)]
    waiting = _request(2, prompt=100, output=10, ttft=0.01)  # the most urgent by far
    policy = _policy()
    _planned(policy, [*running, waiting], now_s=0.0)
    plan = policy.plan(0.5, StepBudget(2048, 2), _View(free_blocks=1000, max_num_seqs=2))
    assert "r2" not in {request_id for request_id, _ in plan.chosen}
    assert plan.running  # the running requests get the step


@pytest.mark.data
@pytest.mark.slow
def test_serves_long_context_traffic_that_the_baselines_serve() -> None:
    """Issue 28's run, halved: long-context prompts (up to ~22k tokens here, a KV cache of 32k) at 0.1/s on the
    A100/Qwen1.5-7B batch profile. slide-batching once stranded most of them (half-computed prompts filled the KV
    cache); now it finishes every request a baseline finishes, with at least the best baseline's TDG ratio."""
    workload = build_workload(str(data_dir() / "long_context_synthetic.jsonl"), rate_per_s=0.1, duration_s=600,
                              seed=0)
    weights = TDGWeights.paper_defaults(workload.to_requests())
    cluster = ClusterSpec(profile="a100-qwen1.5-7b-batch", scheduler=SchedulerConfig(num_gpu_blocks=2048))
    runs = {p: run_policy(workload, p, cluster, tdg_weights=weights)
            for p in ("vllm-fcfs", "sarathi-fcfs", "slide-batching")}
    finished = {p: {r.request_id for r in run.requests if r.state is RequestState.FINISHED}
                for p, run in runs.items()}
    assert max(r.prompt_tokens for r in runs["slide-batching"].requests) > 20_000
    assert finished["vllm-fcfs"] | finished["sarathi-fcfs"] <= finished["slide-batching"]
    tdg = {p: run.summary.overall.tdg_ratio for p, run in runs.items()}
    assert all(value is not None for value in tdg.values())
    assert tdg["slide-batching"] >= max(tdg["vllm-fcfs"], tdg["sarathi-fcfs"])  # type: ignore[operator]


def test_a_prompt_too_costly_for_any_budget_runs_in_large_chunks_unless_a_decode_waits() -> None:
    """At a long context no chunk of this prompt fits η: it runs past the budget anyway. With every deadline
    passed and no decode waiting, nobody is served sooner by a short step, so it takes the engine's token budget;
    beside a waiting decode it takes only ``min_chunk_tokens``."""
    prompt = _started(_request(0, prompt=120_000, output=10, ttft=0.1, tpot=0.03), computed=100_000)
    alone = _policy()
    _planned(alone, [prompt], now_s=100.0)
    plan = alone.plan(101.0, StepBudget(2048, 256), _View(free_blocks=10_000))
    assert plan.estimated_s > plan.budget_s  # past the budget
    assert plan.chosen == (("r0", 2048),)
    decode = _started(_request(1, prompt=100, output=10, arrival=100.0, ttft=5.0, tpot=0.03), computed=100)
    decode.num_output_tokens = 1
    beside = _policy("slide-batching:order=deadline;eta_ms=1")  # nothing fits; the prompt is first in order
    _planned(beside, [prompt, decode], now_s=100.0)
    plan = beside.plan(101.0, StepBudget(2048, 256), _View(free_blocks=10_000))
    assert plan.chosen == (("r0", 32),)
