from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semsched.core.kv import Reservation
from semsched.core.plan import BatchPlan, PreemptionMode, PreemptionReason, StepResult
from semsched.core.request import InvalidRequestError, RequestState
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.policies import POLICIES
from tests.support import (
    make_request,
    make_scheduler,
    near_capacity_shares,
    random_requests,
    run_checked,
    with_long_requests,
)

POLICY_SPECS = [
    *POLICIES.names(),
    "priority-preempt:mode=swap",
    "priority-preempt:exclusive=true",
    "edf:preempt=true",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(POLICY_SPECS),
    block_size=st.sampled_from([1, 4, 16]),
    num_gpu_blocks=st.integers(8, 400),
    budget=st.integers(1, 512),
    max_seqs=st.integers(1, 16),
    cpu_blocks=st.sampled_from([0, 64]),
    reserve=st.booleans(),
    lookahead=st.sampled_from([0, 2]),
    long_requests=near_capacity_shares(),
)
def test_invariants_on_random_workloads(
    seed: int,
    policy: str,
    block_size: int,
    num_gpu_blocks: int,
    budget: int,
    max_seqs: int,
    cpu_blocks: int,
    reserve: bool,
    lookahead: int,
    long_requests: list[tuple[float, int]],
) -> None:
    requests = random_requests(seed, 25, rate=20.0, max_prompt=300, max_output=60)
    # long-context requests up to 0.9 of the KV capacity among the short ones
    requests = with_long_requests(requests, long_requests, num_gpu_blocks * block_size, seed)
    scheduler = make_scheduler(
        policy,
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        max_num_batched_tokens=budget,
        max_num_seqs=max_seqs,
        num_cpu_blocks=cpu_blocks,
        watermark=0.0,
        reservations=(Reservation(max_priority=0, num_blocks=num_gpu_blocks // 4),) if reserve else (),
        num_lookahead_tokens=lookahead,
    )
    run_checked(scheduler, requests)  # checks KV, budget and caps after every step
    terminal = Counter(r.request_id for r in scheduler.finished + scheduler.rejected)
    assert all(count == 1 for count in terminal.values())
    assert set(terminal) == {r.request_id for r in requests}
    for request in requests:
        assert request.state in (RequestState.FINISHED, RequestState.REJECTED)
        if request.state is RequestState.FINISHED:
            times = request.token_times_s()
            assert len(times) == request.target_output_tokens
            assert all(a <= b for a, b in zip(times, times[1:], strict=False))
        else:
            assert request.finish_reason and "KV capacity" in request.finish_reason
    timeline = scheduler.timeline.as_array()
    assert (timeline[1:] >= timeline[:-1]).all()
    assert scheduler.kv.num_free_gpu_blocks == scheduler.kv.num_gpu_blocks


def test_long_prompt_is_prefilled_in_chunks() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=100)
    request = make_request(prompt=250, output=2)
    scheduler.add_request(request, 0.0)
    chunks = []
    now = 0.0
    while scheduler.has_unfinished():
        plan = scheduler.schedule(now)
        chunks.append([c.num_tokens for c in plan.prefill] + [1 for _ in plan.decode])
        now += 1.0
        scheduler.update(plan, StepResult(now))
    assert chunks == [[100], [100], [50], [1]]
    assert request.token_times_s().tolist() == [3.0, 4.0]


def test_running_requests_are_served_before_waiting_ones() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=64)
    first = make_request("a", prompt=200, output=1)
    scheduler.add_request(first, 0.0)
    plan = scheduler.schedule(0.0)
    scheduler.update(plan, StepResult(1.0))
    scheduler.add_request(make_request("b", prompt=10, output=1, arrival=0.5), 1.0)
    plan = scheduler.schedule(1.0)
    assert [c.request.request_id for c in plan.prefill] == ["a"]


def _fill(scheduler, requests, now=0.0):  # type: ignore[no-untyped-def]
    for request in requests:
        scheduler.add_request(request, now)
    plan = scheduler.schedule(now)
    scheduler.update(plan, StepResult(now + 1.0))
    return plan


@pytest.mark.parametrize(("policy", "expected_victim"), [("fcfs", "late"), ("priority", "unimportant")])
def test_kv_pressure_preempts_by_victim_key(policy: str, expected_victim: str) -> None:
    # each request alone fits (28 tokens = 7 blocks), both together do not
    scheduler = make_scheduler(policy, block_size=4, num_gpu_blocks=10, watermark=0.0)
    unimportant = make_request("unimportant", prompt=8, output=20, priority=5, arrival=0.0)
    late = make_request("late", prompt=8, output=20, priority=0, arrival=0.1)
    _fill(scheduler, [unimportant, late], now=0.2)
    now, preempted = 1.2, []
    while not preempted and scheduler.has_unfinished():
        plan = scheduler.schedule(now)
        preempted = [p.request.request_id for p in plan.preempted]
        now += 1.0
        scheduler.update(plan, StepResult(now))
    assert preempted == [expected_victim]
    assert plan.preempted[0].reason is PreemptionReason.KV_PRESSURE


def test_waiting_high_priority_displaces_running_work_only_with_preemption() -> None:
    outcomes = {}
    for policy in ("priority", "priority-preempt"):
        # low holds 16 of 20 blocks after its prefill; urgent needs 5
        scheduler = make_scheduler(policy, block_size=4, num_gpu_blocks=20, watermark=0.0)
        _fill(scheduler, [make_request("low", prompt=60, output=10, priority=3)])
        urgent = make_request("urgent", prompt=20, output=4, priority=0, arrival=1.0)
        scheduler.add_request(urgent, 1.0)
        plan = scheduler.schedule(1.0)
        outcomes[policy] = (
            [c.request.request_id for c in plan.prefill],
            [p.request.request_id for p in plan.preempted],
        )
    assert outcomes["priority"] == ([], [])
    assert outcomes["priority-preempt"] == (["urgent"], ["low"])


def test_swap_preemption_keeps_computed_tokens() -> None:
    scheduler = make_scheduler(
        "priority-preempt:mode=swap", block_size=4, num_gpu_blocks=20, num_cpu_blocks=20, watermark=0.0
    )
    low = make_request("low", prompt=60, output=10, priority=3)
    _fill(scheduler, [low])
    computed = low.num_computed_tokens
    scheduler.add_request(make_request("urgent", prompt=20, output=1, priority=0, arrival=1.0), 1.0)
    plan = scheduler.schedule(1.0)
    assert plan.preempted[0].mode is PreemptionMode.SWAP and plan.swap_out_tokens == computed
    assert low.state is RequestState.PREEMPTED_SWAPPED and low.num_computed_tokens == computed
    scheduler.update(plan, StepResult(2.0))  # urgent finishes
    plan = scheduler.schedule(2.0)
    assert plan.swapped_in == [low] and plan.swap_in_tokens == computed
    assert plan.decode == [low] and not plan.prefill


def test_request_larger_than_kv_is_rejected_with_reason() -> None:
    scheduler = make_scheduler(block_size=16, num_gpu_blocks=4)
    request = make_request(prompt=60, output=10)
    decision = scheduler.add_request(request, 0.0)
    assert not decision.accepted and "KV capacity" in decision.reason
    assert request.state is RequestState.REJECTED and scheduler.rejected == [request]


def test_duplicate_id_and_bad_config_are_clear_errors() -> None:
    scheduler = make_scheduler()
    scheduler.add_request(make_request("x"), 0.0)
    with pytest.raises(InvalidRequestError, match="duplicate"):
        scheduler.add_request(make_request("x"), 0.0)
    with pytest.raises(InvalidRequestError, match="max_num_seqs"):
        SchedulerConfig(max_num_seqs=0)


def test_abort_frees_everything() -> None:
    scheduler = make_scheduler()
    running, waiting = make_request("run", prompt=40), make_request("wait", prompt=40)
    _fill(scheduler, [running])
    scheduler.add_request(waiting, 1.0)
    assert scheduler.abort("run", 1.0) is running and scheduler.abort("wait", 1.0) is waiting
    assert running.state is RequestState.DROPPED and waiting.state is RequestState.DROPPED
    assert not scheduler.has_unfinished() and scheduler.kv.num_free_gpu_blocks == scheduler.kv.num_gpu_blocks
    assert scheduler.abort("nobody", 1.0) is None


def test_priority_preempt_displaces_least_progress_first() -> None:
    scheduler = make_scheduler("priority-preempt", block_size=4, num_gpu_blocks=40, watermark=0.0)
    _fill(scheduler, [make_request("old", prompt=40, output=30, priority=3)])
    _fill(scheduler, [make_request("new", prompt=100, output=30, priority=3, arrival=0.5)], now=1.0)
    # old has computed 41 tokens, new 100 (36 of 40 blocks held); urgent's 40-token prompt needs 10 blocks.
    # vLLM's rule (latest arrival) would evict "new"; least progress evicts "old", which is enough.
    scheduler.add_request(make_request("urgent", prompt=40, output=2, priority=0, arrival=2.0), 2.0)
    plan = scheduler.schedule(2.0)
    assert [p.request.request_id for p in plan.preempted] == ["old"]
    assert "urgent" in [c.request.request_id for c in plan.prefill]


def test_request_that_only_fits_in_reserved_blocks_is_rejected_not_livelocked() -> None:
    reservations = (Reservation(max_priority=0, num_blocks=6),)
    scheduler = make_scheduler(block_size=4, num_gpu_blocks=10, watermark=0.0, reservations=reservations)
    low = make_request("low", prompt=20, output=8, priority=2)  # 7 blocks; only 4 are open to priority 2
    high = make_request("high", prompt=20, output=8, priority=0)
    assert not scheduler.add_request(low, 0.0).accepted
    assert "priority 2" in (low.finish_reason or "")
    assert scheduler.add_request(high, 0.0).accepted
    run_checked(scheduler, [])
    assert high.state is RequestState.FINISHED


def test_a_static_victim_order_is_promised_by_the_class_that_defines_the_key() -> None:
    from semsched.core.scheduler import static_victim_order
    from semsched.policies import make_policy

    assert static_victim_order(make_policy("fcfs"))  # Policy's arrival-order key, promised by FCFS
    assert static_victim_order(make_policy("priority"))
    # priority-preempt inherits priority's promise but its own key reads progress: re-sorted every step
    assert not static_victim_order(make_policy("priority-preempt"))
    assert not static_victim_order(make_policy("sjf"))


def test_a_plan_that_leaves_a_running_request_out_is_never_fast_forwarded() -> None:
    """A decode-only plan repeats unchanged only if it serves every running request: one held back this step
    (vllm-fcfs holds decodes while it admits the FCFS head) runs again in the next. Found by the stress matrix
    (tests/sim/test_stress.py, pd-2+2): a PD decode instance admitting a transferred request held the running
    decode back for a whole fast-forwarded stretch."""
    prefill = make_scheduler("fcfs", num_gpu_blocks=64, block_size=16, watermark=0.0)
    decode = make_scheduler("vllm-fcfs", num_gpu_blocks=64, block_size=16, watermark=0.0)
    first, second = make_request("a", prompt=40, output=30), make_request("b", prompt=40, output=30)
    for request in (first, second):
        prefill.add_request(request, 0.0)
    prefill.update(prefill.schedule(0.0), StepResult(end_time_s=0.1))
    decode.add_transferred(prefill.hand_off("a"), 0.1)
    decode.update(decode.schedule(0.1), StepResult(end_time_s=0.2))
    decode.add_transferred(prefill.hand_off("b"), 0.2)
    plan = decode.schedule(0.2)
    assert plan.is_pure_decode and [r.request_id for r in plan.decode] == ["b"]  # "a" held back this step
    assert decode.steady_decode_steps(plan, limit=100) == 1


def _decoding_pair(num_gpu_blocks: int) -> tuple[Scheduler, BatchPlan]:
    """Two requests decoding speculatively (2 lookahead slots, blocks of 4 tokens), "a" 5 tokens from its target
    and "b" 9, each holding 3 blocks after their first round's schedule."""
    scheduler = make_scheduler("fcfs", num_gpu_blocks=num_gpu_blocks, block_size=4, watermark=0.0,
                               num_lookahead_tokens=2)
    for request in (make_request("a", prompt=8, output=6), make_request("b", prompt=8, output=10)):
        scheduler.add_request(request, 0.0)
    scheduler.update(scheduler.schedule(0.0), StepResult(end_time_s=0.1))  # the prefills emit the first tokens
    plan = scheduler.schedule(0.1)
    assert plan.is_pure_decode and scheduler.kv.num_used_gpu_blocks == 6
    return scheduler, plan


#: tokens "a" and "b" emit in each of their next rounds: "a" reaches its target in round 3, "b" in round 4
ROUNDS = np.array([[2, 1], [2, 3], [2, 3], [2, 3]])


def test_speculative_rounds_repeat_until_a_request_reaches_its_target_or_blocks_run_out() -> None:
    """Round 2 needs one more block ("a" grows past 12 slots), round 3 two; the stretch may end with a finish."""
    for num_gpu_blocks, rounds in [(64, 3), (7, 2), (6, 1)]:
        scheduler, plan = _decoding_pair(num_gpu_blocks)
        assert scheduler.steady_decode_steps(plan, 100, ROUNDS) == rounds, num_gpu_blocks
        assert scheduler.steady_decode_steps(plan, 2, ROUNDS) == min(rounds, 2)
        assert scheduler.steady_decode_steps(plan, 100) == 1  # speculative, without the yields: never


def test_a_stretch_of_speculative_rounds_is_applied_as_round_by_round_updates() -> None:
    stretch, plan = _decoding_pair(64)
    ends = [0.2, 0.3, 0.4]
    stretch.update_steady(plan, ends, ROUNDS)
    single, plan = _decoding_pair(64)
    for index, end_s in enumerate(ends):
        if index:
            plan = single.schedule(ends[index - 1])  # (round 1's plan is the one the stretch repeats)
        accepted = dict(zip("ab", ROUNDS[index].tolist(), strict=True))
        single.update(plan, StepResult(end_s, accepted_tokens=accepted))
    for scheduler in (stretch, single):
        assert [r.request_id for r in scheduler.finished] == ["a"] and scheduler.timeline.last() == 0.4
        assert [r.request_id for r in scheduler.running_requests()] == ["b"]
    for fast, slow in [(stretch.finished[0], single.finished[0]),
                       (stretch.running_requests()[0], single.running_requests()[0])]:
        assert (fast.num_output_tokens, fast.num_computed_tokens, fast.token_times_s().tolist()) == (
            slow.num_output_tokens, slow.num_computed_tokens, slow.token_times_s().tolist())
    assert stretch.kv.num_used_gpu_blocks == single.kv.num_used_gpu_blocks
