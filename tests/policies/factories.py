"""Scenarios for the per-policy tests: which request a policy serves first, and whom it displaces."""

from __future__ import annotations

import random
from collections.abc import Sequence

from semsched.core.plan import StepResult
from semsched.core.policy import Policy
from semsched.core.request import Request, RequestState
from tests.support import make_scheduler, run_checked


def service_order(policy: str, requests: Sequence[Request]) -> list[str]:
    """Request ids in the order of their first token, on an engine that runs one sequence at a time (so the
    order is the policy's waiting order, not a batch's)."""
    scheduler = make_scheduler(policy, max_num_seqs=1, block_size=4, num_gpu_blocks=1000, watermark=0.0)
    run_checked(scheduler, requests)
    started = sorted(requests, key=lambda r: (r.first_token_time_s, r.request_id))
    return [r.request_id for r in started]


def displaced_by(policy: str, running: Sequence[Request], arrival: Request, *, num_gpu_blocks: int) -> list[str]:
    """Ids of the running requests preempted for ``arrival`` in the first step after it arrives."""
    scheduler = make_scheduler(policy, block_size=4, num_gpu_blocks=num_gpu_blocks, watermark=0.0)
    for request in running:
        scheduler.add_request(request, 0.0)
    plan = scheduler.schedule(0.0)
    scheduler.update(plan, StepResult(end_time_s=1.0))
    scheduler.add_request(arrival, arrival.arrival_time_s)
    plan = scheduler.schedule(arrival.arrival_time_s)
    return [p.request.request_id for p in plan.preempted]


def running_request_event(
    policy: Policy, request: Request, action: float, rng: random.Random, now_s: float
) -> None:
    """What may happen to running ``request``, by ``action`` in [0, 1), with the hook a scheduler calls: tokens
    (0.7: 1, 3 or 9; ``on_tokens`` once they reach ``notify_tokens_at``), a preemption (0.15), a hand-off back into
    the queue (0.05: ``on_leave`` then ``on_arrival``) or its finish."""
    if action < 0.7:
        count = rng.choice([1, 1, 3, 9])
        request.num_output_tokens += count
        if request.num_output_tokens >= request.notify_tokens_at:
            policy.on_tokens(request, count, now_s)
    elif action < 0.85:
        request.state = RequestState.PREEMPTED_RECOMPUTE
        policy.on_preempt(request, now_s)
    elif action < 0.9:
        request.state = RequestState.WAITING
        policy.on_leave(request)
        policy.on_arrival(request, now_s)
    else:
        request.state = RequestState.FINISHED
        policy.on_finish(request, now_s)
