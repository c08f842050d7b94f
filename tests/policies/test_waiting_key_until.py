"""``waiting_key_until``: a waiting request's key holds until the time its policy gives (the vLLM adapter's queue
then re-keys only the requests whose time has come), and that time is when it changes, not a bound far ahead."""

from __future__ import annotations

import copy
import math
import random

import pytest

from semsched.policies import make_policy
from tests.support import make_request

SPECS = ["ltr:starve_s=2", "fastserve:starve_s=2", "utility:starve_s=4;risk_slack=0.6;protect_weight=1",
         "utility:starve_s=0;risk_slack=0.3;protect_weight=1", "utility:starve_s=30", "gittins:slo_slack=0.5"]


@pytest.mark.parametrize("spec", SPECS)
def test_a_waiting_key_holds_until_the_time_its_policy_gives(spec: str) -> None:
    """Random requests, entered and keyed at random times (some preempted after running a while): the key at
    any time from then to the policy's ``until`` is the key then; just past the turn it answers for, the key
    changes for most of them (the time is the turn, not a bound far ahead)."""
    rng = random.Random(7)
    policy = make_policy(spec)
    assert policy.uses_hook("waiting_key_until") and policy.rekey_interval_s is not None
    finite = changed = 0
    for i in range(300):
        arrival = rng.uniform(0.0, 10.0)
        request = make_request(f"r{i}", prompt=rng.randrange(1, 5000), output=rng.randrange(2, 300),
                               arrival=arrival, priority=rng.randrange(3),
                               ttft_slo_s=rng.choice([None, 1.0, 3.0, 6.0]),
                               e2e_slo_s=rng.choice([None, 8.0, 20.0]))
        entered = arrival + rng.uniform(0.0, 2.0)
        policy.on_arrival(request, entered)
        if rng.random() < 0.3:  # it ran a while and was preempted: back in the queue with tokens out
            request.num_computed_tokens = request.prompt_tokens
            request.num_output_tokens = rng.randrange(1, request.output_tokens)
            if policy.uses_hook("on_tokens"):  # (fastserve's demotions, ltr's promotion spent)
                policy.on_tokens(request, request.num_output_tokens, entered)
            request.num_preemptions += 1
            entered += rng.uniform(0.0, 3.0)
            policy.on_preempt(request, entered)
        now = entered + rng.choice([0.0, rng.uniform(0.0, 6.0)])
        key = policy.waiting_key(request, now)
        until = policy.waiting_key_until(request, now)
        assert until >= now - 1e-6, (request.request_id, now, until)
        if math.isfinite(until):
            finite += 1
            probes = [now + (until - now) * f for f in (0.0, 0.25, 0.5, 0.999)] + [until]
        else:
            probes = [now + 1.0, now + 100.0, now + 1e5]
        for t in probes:  # (each on a copy: a key past a turn may change the request's state)
            assert policy.waiting_key(copy.deepcopy(request), t) == key, (request.request_id, now, until, t)
        if math.isfinite(until) and policy.waiting_key(copy.deepcopy(request), until + 1e-6) != key:
            changed += 1
    assert finite >= 60
    assert changed >= 0.8 * finite
