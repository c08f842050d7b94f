"""fairbatching: per-token deadlines (TDG eq. 3); near-deadline decodes, then prefills, then the other decodes."""

from __future__ import annotations

import math

import pytest

from semsched.core.plan import StepResult
from semsched.core.scheduler import Scheduler
from semsched.policies import PolicyError, make_policy
from semsched.policies.fairbatching import token_deadline_s
from tests.policies.factories import service_order
from tests.support import make_request, make_scheduler, random_requests, run_checked


def test_token_deadlines_follow_tdg() -> None:
    request = make_request("r", arrival=2.0, ttft_slo_s=1.0, tpot_slo_s=0.1)
    assert [token_deadline_s(request, j) for j in range(3)] == pytest.approx([3.0, 3.1, 3.2])
    no_tpot = make_request("s", arrival=2.0, ttft_slo_s=1.0)
    assert token_deadline_s(no_tpot, 0) == 3.0 and token_deadline_s(no_tpot, 1) == math.inf
    assert token_deadline_s(make_request("t"), 0) == math.inf


def _decoding_scheduler() -> Scheduler:
    """Two requests decoding after one step at t=0: "tight" (TPOT 20 ms) and "slack" (no SLO), and a budget of
    40 tokens that a waiting 400-token prompt would fill."""
    scheduler = make_scheduler("fairbatching:tbt_slo_ms=1000", block_size=4, num_gpu_blocks=1000,
                               max_num_batched_tokens=40, watermark=0.0)
    scheduler.add_request(make_request("tight", prompt=8, output=50, ttft_slo_s=0.5, tpot_slo_s=0.02), 0.0)
    scheduler.add_request(make_request("slack", prompt=8, output=50), 0.0)
    plan = scheduler.schedule(0.0)
    scheduler.update(plan, StepResult(end_time_s=0.01))
    return scheduler


def test_near_deadline_decodes_go_before_prefills_and_slack_decodes_after() -> None:
    scheduler = _decoding_scheduler()
    scheduler.add_request(make_request("prompt", prompt=400, output=5, arrival=0.01, ttft_slo_s=5.0), 0.01)
    # at 0.51 s the tight request's second token (due 0.52 s) is within its TPOT margin (20 ms)
    plan = scheduler.schedule(0.51)
    assert [r.request_id for r in plan.decode] == ["tight"]
    assert [c.request.request_id for c in plan.prefill] == ["prompt"]
    assert plan.prefill[0].num_tokens == 40 - 1  # the slack decode waits: the prefill takes the rest


def test_slack_decodes_run_with_the_budget_left() -> None:
    scheduler = _decoding_scheduler()
    scheduler.add_request(make_request("short", prompt=10, output=5, arrival=0.01, ttft_slo_s=5.0), 0.01)
    plan = scheduler.schedule(0.02)  # nobody near a deadline; the prompt leaves budget for both decodes
    assert sorted(r.request_id for r in plan.decode) == ["slack", "tight"]
    assert [c.request.request_id for c in plan.prefill] == ["short"]


def test_waiting_order_is_the_first_token_deadline() -> None:
    requests = [
        make_request("blocker", output=50, ttft_slo_s=1.0),
        make_request("loose", arrival=0.1, ttft_slo_s=10.0),
        make_request("none", arrival=0.2),
        make_request("tight", arrival=0.3, ttft_slo_s=0.5),
    ]
    assert service_order("fairbatching", requests) == ["blocker", "tight", "loose", "none"]


@pytest.mark.parametrize(("blocks", "budget"), [(12, 2), (40, 16), (400, 512)])
def test_finishes_everything_on_small_engines(blocks: int, budget: int) -> None:
    requests = random_requests(3, 30, rate=30.0, max_prompt=150, max_output=30, with_slos=True)
    for request in requests:
        request.tpot_slo_s = 0.05
    scheduler = make_scheduler("fairbatching", block_size=4, num_gpu_blocks=blocks, max_num_batched_tokens=budget,
                               max_num_seqs=4, watermark=0.0)
    run_checked(scheduler, requests)
    assert len(scheduler.finished) + len(scheduler.rejected) == len(requests)


def test_bad_config_names_the_field() -> None:
    with pytest.raises(PolicyError, match="margin_ms"):
        make_policy("fairbatching:margin_ms=-1")
    assert make_policy("fairbatching:margin_ms=5").describe()["margin_ms"] == 5.0
