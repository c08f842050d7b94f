"""vllm-fcfs: prefill first (no decode while the FCFS head could be admitted), FCFS, and no deadlock."""

from __future__ import annotations

import pytest

from semsched.core.kv import blocks_for
from semsched.core.plan import StepResult
from semsched.core.request import Request
from semsched.core.scheduler import Scheduler
from semsched.policies import PolicyError, make_policy
from semsched.policies.vllm_fcfs import step_blocks
from tests.policies.factories import service_order
from tests.support import check_kv, check_plan, make_request, make_scheduler, random_requests


def _head_admissible(scheduler: Scheduler) -> bool:
    """The rule, computed from the scheduler's own state: the FCFS head's whole sequence fits in what an
    admission may take after the running prompts' remaining blocks, and a sequence slot is free."""
    waiting = sorted(scheduler.waiting_requests(), key=lambda r: r.arrival_time_s)
    if not waiting or scheduler.num_running >= scheduler.config.max_num_seqs:
        return False
    head = waiting[0]
    prompts = [r for r in scheduler.running_requests() if r.in_prefill]
    if step_blocks(prompts, scheduler.block_size) > min(
        (scheduler.kv.available_for(r, admission=False) for r in prompts), default=10**9
    ):
        return False
    need = blocks_for(head.num_tokens, scheduler.block_size) + step_blocks(prompts, scheduler.block_size)
    return need <= scheduler.kv.available_for(head, admission=True)


def _drive(scheduler: Scheduler, requests: list[Request], step_s: float = 0.01) -> tuple[int, int]:
    """Run to completion; count steps that held decodes back for a prefill and steps with decodes while a
    head waited that could not be admitted. Fails if a decode ran beside an admissible head."""
    pending = sorted(requests, key=lambda r: r.arrival_time_s)
    now, index, held, decoded_past_head = 0.0, 0, 0, 0
    while index < len(pending) or scheduler.has_unfinished():
        while index < len(pending) and pending[index].arrival_time_s <= now:
            scheduler.add_request(pending[index], now)
            index += 1
        admissible = _head_admissible(scheduler)
        decoding = [r for r in scheduler.running_requests() if not r.in_prefill]
        plan = scheduler.schedule(now)
        check_plan(scheduler, plan)
        check_kv(scheduler)
        if admissible:
            assert not plan.decode, "a decode ran while an admissible prefill waited"
            held += bool(decoding)
        elif plan.decode and scheduler.num_waiting:
            decoded_past_head += 1
        if plan.is_empty:
            assert index < len(pending), "stalled with unfinished requests"
            now = max(now, pending[index].arrival_time_s)
            continue
        now += step_s
        scheduler.update(plan, StepResult(end_time_s=now))
    return held, decoded_past_head


def test_never_decodes_while_an_admissible_prefill_waits() -> None:
    scheduler = make_scheduler("vllm-fcfs", block_size=4, num_gpu_blocks=200, max_num_batched_tokens=256,
                               max_num_seqs=8, watermark=0.0)
    requests = random_requests(4, 60, rate=30.0, max_prompt=200, max_output=40)
    held, _ = _drive(scheduler, requests)
    assert held > 0  # the rule was exercised: decodes waited for prefills
    assert len(scheduler.finished) == len(requests)


def test_decodes_run_when_the_head_does_not_fit() -> None:
    # the running request holds most blocks; the big arrival fits only once it has finished
    scheduler = make_scheduler("vllm-fcfs", block_size=4, num_gpu_blocks=40, watermark=0.0)
    requests = [make_request("small", prompt=60, output=40),
                make_request("big", prompt=120, output=10, arrival=0.05)]
    _, decoded_past_head = _drive(scheduler, requests)
    assert decoded_past_head > 0
    assert [r.request_id for r in scheduler.finished] == ["small", "big"]


def test_fcfs_order_and_prefill_priority_on_random_engines() -> None:
    requests = [make_request("a", output=30), make_request("b", arrival=0.1), make_request("c", arrival=0.2)]
    assert service_order("vllm-fcfs", requests) == ["a", "b", "c"]
    for seed, blocks in ((1, 30), (2, 60), (3, 400)):
        scheduler = make_scheduler("vllm-fcfs", block_size=16, num_gpu_blocks=blocks, max_num_batched_tokens=64,
                                   max_num_seqs=4, watermark=0.01)
        requests = random_requests(seed, 30, rate=40.0, max_prompt=300, max_output=30)
        _drive(scheduler, requests)
        assert len(scheduler.finished) + len(scheduler.rejected) == len(requests)


def test_bad_config_names_the_field() -> None:
    with pytest.raises(PolicyError, match="margin_blocks"):
        make_policy("vllm-fcfs:margin_blocks=-1")
    assert make_policy("vllm-fcfs").describe() == {"policy": "vllm-fcfs", "margin_blocks": 0}
