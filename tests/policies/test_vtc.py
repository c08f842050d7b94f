"""vtc: weighted virtual token counters per client; the least-served client's waiting request first."""

from __future__ import annotations

import numpy as np
import pytest

from semsched.core.plan import StepResult
from semsched.core.request import Request
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.policies import PolicyError, make_policy
from semsched.policies.vtc import VTC, client_of
from tests.support import CallCounter, check_kv, check_plan, make_request, make_scheduler

PROMPT, OUTPUT, MAX_SEQS = 20, 10, 2
INPUT_COST, OUTPUT_COST = 1.0, 2.0
WEIGHTS = {"f": 2.0, "g": 1.0}  # PROSERVE's default: the most important priority seen (0) weighs 2


def _backlog(per_client: int) -> list[Request]:
    """Two clients, everything arriving at once, f's requests first in line (FCFS would serve f only)."""
    f = [make_request(f"f{i}", prompt=PROMPT, output=OUTPUT, priority=0, client="f") for i in range(per_client)]
    g = [make_request(f"g{i}", prompt=PROMPT, output=OUTPUT, priority=1, client="g") for i in range(per_client)]
    return f + g


def _weighted_served(requests: list[Request], client: str) -> float:
    """Tokens the engine has computed for ``client`` (prompt tokens and emitted output tokens), priced as VTC
    prices them and divided by the client's weight: measured on the requests, not read from the policy."""
    raw = sum(INPUT_COST * min(r.num_computed_tokens, r.prompt_tokens) + OUTPUT_COST * r.num_output_tokens
              for r in requests if r.client == client)
    return raw / WEIGHTS[client]


def _largest_gap_while_backlogged(policy: str) -> tuple[float, int]:
    """Run the backlog; the largest |weighted served f - weighted served g| while both clients have waiting
    requests, and the steps that took."""
    requests = _backlog(40)
    scheduler = make_scheduler(policy, block_size=4, num_gpu_blocks=1000, max_num_batched_tokens=64,
                               max_num_seqs=MAX_SEQS, watermark=0.0)
    for request in requests:
        scheduler.add_request(request, 0.0)
    now, gap, steps = 0.0, 0.0, 0
    while {r.client for r in scheduler.waiting_requests()} == {"f", "g"}:
        plan = scheduler.schedule(now)
        check_plan(scheduler, plan)
        check_kv(scheduler)
        now += 0.01
        scheduler.update(plan, StepResult(end_time_s=now))
        steps += 1
        gap = max(gap, abs(_weighted_served(requests, "f") - _weighted_served(requests, "g")))
    return gap, steps


def test_weighted_token_shares_stay_within_the_fairness_bound() -> None:
    # Bound (vtc.py's docstring): counters differ by at most (I + B * O) / w_min while both clients wait, and
    # served tokens trail the counters by at most the B prompts admitted but not yet computed, B * I / w_min,
    # on either side: |served_f - served_g| <= (I + B * O + 2 * B * I) / w_min.
    one_input, one_output = INPUT_COST * PROMPT, OUTPUT_COST * OUTPUT
    bound = (one_input + MAX_SEQS * one_output + 2 * MAX_SEQS * one_input) / min(WEIGHTS.values())
    gap, steps = _largest_gap_while_backlogged("vtc")
    assert steps > 100  # long enough that the bound is far below what either client was served
    assert gap <= bound
    fcfs_gap, _ = _largest_gap_while_backlogged("fcfs")
    assert fcfs_gap > 3 * bound  # FCFS serves f alone: the bound is not trivially met


def test_raw_tokens_follow_the_weights() -> None:
    requests = _backlog(40)
    scheduler = make_scheduler("vtc", block_size=4, num_gpu_blocks=1000, max_num_batched_tokens=64,
                               max_num_seqs=MAX_SEQS, watermark=0.0)
    for request in requests:
        scheduler.add_request(request, 0.0)
    now = 0.0
    for _ in range(300):
        plan = scheduler.schedule(now)
        now += 0.01
        scheduler.update(plan, StepResult(end_time_s=now))
    served = {c: _weighted_served(requests, c) * WEIGHTS[c] for c in WEIGHTS}
    assert served["f"] / served["g"] == pytest.approx(2.0, rel=0.15)


def test_a_returning_client_is_lifted_to_the_least_active_counter() -> None:
    scheduler = make_scheduler("vtc", block_size=4, num_gpu_blocks=1000, max_num_seqs=1, watermark=0.0)
    vtc = scheduler.policy
    assert isinstance(vtc, VTC)
    for i in range(3):
        scheduler.add_request(make_request(f"a{i}", prompt=20, output=20, client="a"), 0.0)
    now = 0.0
    for _ in range(30):
        plan = scheduler.schedule(now)
        now += 0.01
        scheduler.update(plan, StepResult(end_time_s=now))
    assert vtc.counter("a") > 0 and vtc.counter("b") == 0
    scheduler.add_request(make_request("b0", prompt=20, output=20, client="b", arrival=now), now)
    assert vtc.counter("b") == vtc.counter("a")  # b may not claim the service it missed while away


def test_client_falls_back_to_priority() -> None:
    assert client_of(make_request("x", priority=3)) == "priority:3"
    assert client_of(make_request("x", priority=3, client="acme")) == "acme"


def test_configured_weights_and_errors() -> None:
    policy = make_policy("vtc:weights=1/3")
    assert isinstance(policy, VTC)
    assert (policy.weight(0), policy.weight(1), policy.weight(5)) == (1.0, 3.0, 1.0)
    for spec, field in (("weights=1/0", r"weights\[1\]"), ("input_cost=-1", "input_cost"),
                        ("input_cost=0;output_cost=0", "input_cost and output_cost"), ("rekey_s=0", "rekey_s")):
        with pytest.raises(PolicyError, match=field):
            make_policy(f"vtc:{spec}")
    assert make_policy("vtc").describe()["output_cost"] == 2.0


class _KeyedVTC(VTC):
    """VTC on the core's keyed queue, every waiting request re-keyed each step: what waiting_order replaces."""

    def uses_hook(self, hook: str) -> bool:
        return False if hook == "waiting_order" else super().uses_hook(hook)


def _clients_traffic(seed: int) -> list[Request]:
    """Five clients of mixed priorities, Poisson arrivals, random prompts and outputs, some preemptions."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.01, 150))
    return [make_request(f"r{i}", prompt=int(rng.integers(1, 200)), output=int(rng.integers(1, 60)),
                         arrival=float(arrivals[i]), priority=int(rng.integers(0, 3)),
                         client=f"c{int(rng.integers(0, 5))}") for i in range(150)]


@pytest.mark.parametrize("seed", range(4))
def test_the_lazy_waiting_order_admits_as_re_keying_every_request_would(seed: int) -> None:
    """With re-keying every step (the default), the order merged from the front of each client's queue starts
    every request when the core's keyed queue, re-keyed in full each step, does: same admissions, same times."""
    outcomes = []
    for policy in (make_policy("vtc"), _KeyedVTC()):
        assert policy.uses_hook("waiting_order") is not isinstance(policy, _KeyedVTC)
        scheduler = Scheduler(SchedulerConfig(block_size=4, num_gpu_blocks=300, max_num_batched_tokens=96,
                                              max_num_seqs=8, watermark=0.0), policy)
        pending, now, index = _clients_traffic(seed), 0.0, 0
        while index < len(pending) or scheduler.has_unfinished():
            while index < len(pending) and pending[index].arrival_time_s <= now:
                scheduler.add_request(pending[index], now)
                index += 1
            plan = scheduler.schedule(now)
            if plan.is_empty:
                now = pending[index].arrival_time_s
                continue
            now += 0.01
            scheduler.update(plan, StepResult(end_time_s=now))
        outcomes.append([(r.request_id, r.first_scheduled_time_s, r.finish_time_s, r.num_preemptions)
                         for r in pending])
    assert outcomes[0] == outcomes[1]
    assert any(preemptions for *_, preemptions in outcomes[0])  # KV pressure re-queued some of them


def test_a_burst_of_arrivals_is_keyed_in_linear_work_with_the_keys_a_rebuild_gives() -> None:
    """Keyed by the core (as inside vLLM, whose queue asks ``waiting_key`` of each request added): N requests
    added before any step cost O(N) input charges, not one walk over the client's queue per arrival, and every
    request's key is the one re-keying all of them from the counters gives."""
    policy = _KeyedVTC()
    charge = policy.input_charge
    charges = CallCounter(policy, "input_charge")
    scheduler = Scheduler(SchedulerConfig(block_size=4, num_gpu_blocks=1000, max_num_batched_tokens=64,
                                          max_num_seqs=4, watermark=0.0), policy)
    burst = [make_request(f"b{i}", prompt=10 + i % 7, output=5, priority=i % 2, client=f"c{i % 3}")
             for i in range(400)]
    for request in burst:
        scheduler.add_request(request, 0.0)
    assert charges.calls <= 3 * len(burst)  # (one walk per arrival: 400 * 399 / 6 per client, ~26,600)
    keyed = {r.request_id: policy.waiting_key(r, 0.0)[0] for r in burst}
    policy._keys_version = -1  # every key again, from the counters
    assert {r.request_id: policy.waiting_key(r, 0.0)[0] for r in burst} == keyed
    levels = sorted({r.client for r in burst})
    for client in levels:  # a client's keys step up by its requests' input charges, in arrival order
        mine = [r for r in burst if r.client == client]
        assert keyed[mine[1].request_id] == keyed[mine[0].request_id] + charge(mine[0])
