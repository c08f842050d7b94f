"""cost_index: bucketed refresh of a request's index, outlived predictions, and when the order is stable."""

from __future__ import annotations

import numpy as np
import pytest

from semsched.core.request import LengthDistribution, Request, RequestState
from semsched.policies import make_policy
from semsched.policies.cost_index import CostIndexPolicy
from semsched.policies.cost_model import CostDistribution
from semsched.policies.gittins import gittins_index
from semsched.policies.registry import PolicyError
from tests.support import make_request, random_requests, simulate

SHORT_OR_LONG = LengthDistribution((10, 100), (0.5, 0.5))


def _policy(spec: str) -> CostIndexPolicy:
    policy = make_policy(spec)
    assert isinstance(policy, CostIndexPolicy)
    return policy


def _index_after_each_token(policy: CostIndexPolicy, request: Request, tokens: int) -> list[float]:
    policy.on_arrival(request, 0.0)
    indices = [policy.index(request)]
    for _ in range(tokens):
        request.num_output_tokens += 1
        policy.on_tokens(request, 1, 0.0)
        indices.append(policy.index(request))
    return indices


def _short_or_long() -> Request:
    return make_request(prompt=8, output=100, predicted_output=SHORT_OR_LONG)


def _gittins_at(generated: int) -> float | None:
    return gittins_index(CostDistribution.of(SHORT_OR_LONG, 8, "output"), float(generated))


def test_the_index_is_refreshed_only_when_the_attained_cost_enters_a_new_bucket() -> None:
    """Cost range [0, 100] in 4 buckets of 25: refreshed at 25, 50 and 75 tokens, conditioned on those ages."""
    policy = _policy("gittins:cost=output;buckets=4")
    indices = _index_after_each_token(policy, _short_or_long(), 99)
    changes = [g for g in range(1, 100) if indices[g] != indices[g - 1]]
    assert changes == [25, 50, 75]
    assert indices[0] == _gittins_at(0) == 20.0  # (0.5 * 10 + 10 * 0.5) / 0.5
    assert indices[24] == 20.0  # stale inside bucket 0, although the short mode has passed at 10
    assert [indices[g] for g in (25, 50, 75)] == [_gittins_at(g) for g in (25, 50, 75)] == [75.0, 50.0, 25.0]


def test_bucket_tokens_puts_a_boundary_every_so_many_tokens() -> None:
    policy = _policy("gittins:cost=resource;bucket_tokens=30")
    indices = _index_after_each_token(policy, _short_or_long(), 99)
    assert [g for g in range(1, 100) if indices[g] != indices[g - 1]] == [30, 60, 90]


def test_tokens_reported_together_refresh_as_one_at_a_time_would() -> None:
    """A fast-forwarded stretch reports many tokens at once; the index conditions on the bucket's first token."""
    for spec in ("gittins:cost=output;buckets=4", "gittins:buckets=7", "mean:cost=weighted;buckets=3"):
        one_by_one = make_request(prompt=8, output=100, predicted_output=SHORT_OR_LONG)
        expected = _index_after_each_token(_policy(spec), one_by_one, 97)[-1]
        policy, together = _policy(spec), make_request(prompt=8, output=100, predicted_output=SHORT_OR_LONG)
        policy.on_arrival(together, 0.0)
        for count in (3, 40, 54):
            together.num_output_tokens += count
            policy.on_tokens(together, count, 0.0)
        assert policy.index(together) == expected


def test_without_refresh_the_index_is_computed_once_at_arrival() -> None:
    policy = _policy("gittins:cost=output;refresh=false")
    assert not policy.uses_hook("on_tokens") and _policy("gittins").uses_hook("on_tokens")
    request = make_request(prompt=8, output=100, predicted_output=SHORT_OR_LONG)
    request.num_output_tokens = 60  # (a request the policy first sees late still gets its age-0 index)
    assert policy.index(request) == _gittins_at(0)


def test_an_outlived_prediction_falls_to_the_one_token_floor_and_stays() -> None:
    policy = _policy("gittins:cost=resource;bucket_tokens=5")
    request = make_request(prompt=40, output=200, predicted_output=SHORT_OR_LONG)
    indices = _index_after_each_token(policy, request, 150)
    assert indices[100] == indices[150] == 40.5  # C(1) - C(0) = 1/2 + 40
    assert min(indices) == 40.5


def test_stable_only_while_no_unfinished_index_can_still_rise() -> None:
    policy = _policy("gittins:cost=output;buckets=4")
    point = make_request("point", predicted_output=LengthDistribution.point(30))
    policy.on_arrival(point, 0.0)
    policy.on_arrival(make_request("truth", output=30), 0.0)
    assert policy.stable_between_events
    rising = make_request("rising", prompt=8, output=100, predicted_output=SHORT_OR_LONG)
    _index_after_each_token(policy, rising, 99)
    assert not policy.stable_between_events
    rising.num_output_tokens += 1
    policy.on_tokens(rising, 1, 0.0)  # past its largest predicted length: only the floor is left
    assert policy.stable_between_events
    policy.on_arrival(make_request("again", predicted_output=SHORT_OR_LONG), 0.0)
    assert not policy.stable_between_events
    unrefreshed = _policy("gittins:refresh=false")
    unrefreshed.on_arrival(make_request("again", predicted_output=SHORT_OR_LONG), 0.0)
    assert unrefreshed.stable_between_events


def test_a_rising_index_displaces_mid_decode_in_both_simulator_modes() -> None:
    """One sequence slot: "gamble" (true 50 tokens; predicted 5 or 200, index 10) runs before "steady"
    (predicted 150) until its index is refreshed at 20 tokens (buckets of 20): 180 > 150."""
    runs = {}
    for fast_forward in (True, False):
        requests = [
            make_request(
                "gamble", prompt=32, output=50, predicted_output=LengthDistribution((5, 200), (0.5, 0.5))
            ),
            make_request(
                "steady", prompt=32, output=10, arrival=0.001, predicted_output=LengthDistribution.point(150)
            ),
        ]
        simulate(requests, "gittins:cost=output;displace=true", fast_forward=fast_forward, max_num_seqs=1)
        runs[fast_forward] = [(r.num_preemptions, r.token_times_s().tolist()) for r in requests]
    assert runs[True] == runs[False]
    (preemptions, gamble), (_, steady) = runs[False]
    assert preemptions == 1 and len(gamble) == 50
    assert gamble[19] < steady[0] < steady[-1] < gamble[20]


def test_point_predictions_keep_fast_forward() -> None:
    def run(fast_forward: bool) -> tuple[int, int, list[list[float]]]:
        rng = np.random.default_rng(4)
        requests = [
            make_request(
                str(i),
                prompt=int(rng.integers(16, 200)),
                output=int(rng.integers(20, 120)),
                arrival=0.02 * i,
                predicted_output=LengthDistribution.point(int(rng.integers(20, 120))),
            )
            for i in range(40)
        ]
        result = simulate(requests, "gittins", fast_forward=fast_forward, max_num_seqs=4)
        return result.num_steps, result.num_events, [r.token_times_s().tolist() for r in requests]

    fast, slow = run(True), run(False)
    assert fast[0] == slow[0] and fast[2] == slow[2]
    assert fast[1] < fast[0] / 2


@pytest.mark.parametrize("spec", ["gittins:buckets=0", "gittins:bucket_tokens=0", "mean:cost=memory"])
def test_bad_parameters_are_refused(spec: str) -> None:
    with pytest.raises(PolicyError):
        make_policy(spec)


def test_slo_slack_puts_a_protected_request_near_its_ttft_deadline_first() -> None:
    policy = _policy("gittins:slo_slack=0.5;cost=output")
    costly = make_request("costly", prompt=10, output=400, arrival=0.0, priority=1)
    costly.ttft_slo_s = 2.0  # at risk from t = 1.0 (half of its SLO used) until its deadline at 2.0
    cheap = make_request("cheap", prompt=10, output=4, arrival=0.5, priority=1)  # no SLO: the index alone
    assert policy.waiting_key(cheap, 0.9) < policy.waiting_key(costly, 0.9)
    assert policy.waiting_key(costly, 1.0) < policy.waiting_key(cheap, 1.0)
    assert policy.waiting_key(cheap, 2.0) < policy.waiting_key(costly, 2.0)  # missed: back to the index order
    later = make_request("later", prompt=10, output=400, arrival=0.2, priority=0)
    later.ttft_slo_s = 1.5  # deadline 1.7 < 2.0: earliest deadline first among the protected at risk
    assert policy.waiting_key(later, 1.2) < policy.waiting_key(costly, 1.2)
    standard = make_request("standard", prompt=10, output=400, arrival=0.0, priority=2)
    standard.ttft_slo_s = 2.0  # a less important tier is not protected
    assert policy.waiting_key(cheap, 1.5) < policy.waiting_key(standard, 1.5)
    assert policy.rekey_interval_s == 0.1 and not policy.stable_between_events
    assert _policy("gittins").rekey_interval_s is None


@pytest.mark.parametrize("spec", ["gittins:slo_slack=x", "gittins:slo_slack=1.5", "gittins:check_s=0"])
def test_bad_slo_settings_are_refused_by_name(spec: str) -> None:
    with pytest.raises(PolicyError, match="slo_slack|check_s"):
        make_policy(spec)


def _ttft_attainment(requests: list[Request], priorities: tuple[int, ...]) -> float:
    chosen = [r for r in requests if r.ttft_slo_s is not None and r.priority in priorities]
    met = [r for r in chosen if r.first_token_time_s is not None
           and r.first_token_time_s - r.arrival_time_s <= r.ttft_slo_s]  # type: ignore[operator]
    return len(met) / len(chosen)


def test_slo_slack_raises_the_protected_tiers_ttft_attainment_alike_in_both_modes() -> None:
    def run(spec: str, fast_forward: bool) -> list[Request]:
        requests = random_requests(7, 200, rate=12.0, max_prompt=300, max_output=150, num_priorities=4,
                                   with_slos=True)
        simulate(requests, spec, fast_forward=fast_forward, max_num_seqs=8, num_gpu_blocks=200)
        return requests

    fast, slow = run("gittins:slo_slack=0.5", True), run("gittins:slo_slack=0.5", False)
    assert [r.token_times_s().tolist() for r in fast] == [r.token_times_s().tolist() for r in slow]
    assert all(r.state is RequestState.FINISHED for r in fast)
    plain = run("gittins", True)
    assert _ttft_attainment(fast, (0, 1)) > _ttft_attainment(plain, (0, 1))


@pytest.mark.parametrize("cost", ["resource", "output", "weighted"])
@pytest.mark.parametrize("prompt", [1, 7, 300, 4096])
@pytest.mark.parametrize("buckets", [1, 3, 10, 97])
def test_the_next_bucket_boundary_is_the_first_count_a_per_token_scan_finds(
    cost: str, prompt: int, buckets: int
) -> None:
    """on_tokens skips every count below the stored boundary: the boundary (the cost model's inverse, then
    checked) must be the first count whose bucket changes, for every bucket a long request passes through."""
    policy = _policy(f"gittins:cost={cost};buckets={buckets}")
    prediction = LengthDistribution((3, 40, 150), (0.2, 0.5, 0.3))
    request = make_request(prompt=prompt, output=400, predicted_output=prediction)
    policy.on_arrival(request, 0.0)
    generated = 0
    while generated < 400:
        bucket = policy._bucket_of(request, generated)
        expected = next(g for g in range(generated + 1, 10**6) if policy._bucket_of(request, g) > bucket)
        assert policy._tokens.next_bucket_entry(request, bucket, generated) == expected
        generated = expected


@pytest.mark.parametrize(
    "spec", ["gittins", "mean", "gittins:cost=weighted;buckets=7", "mean:cost=output;buckets=3"]
)
def test_tokens_in_uneven_stretches_give_the_index_one_at_a_time_gives(spec: str) -> None:
    """The window on_tokens keeps (nothing to do below the next boundary) changes no index: stretches of 1 to 37
    tokens give, after each stretch, the index that reporting every token alone gives."""
    rng = np.random.default_rng(7)
    for prediction in (None, SHORT_OR_LONG, LengthDistribution((5, 60, 61, 300), (0.1, 0.4, 0.2, 0.3))):
        single, together = _policy(spec), _policy(spec)
        a = make_request(prompt=50, output=320, predicted_output=prediction)
        b = make_request(prompt=50, output=320, predicted_output=prediction)
        single.on_arrival(a, 0.0)
        together.on_arrival(b, 0.0)
        while b.num_output_tokens < 320:
            stretch = int(min(rng.integers(1, 38), 320 - b.num_output_tokens))
            for _ in range(stretch):
                a.num_output_tokens += 1
                single.on_tokens(a, 1, 0.0)
            b.num_output_tokens += stretch
            together.on_tokens(b, stretch, 0.0)
            assert together.index(b) == single.index(a)


@pytest.mark.parametrize("cost", ["resource", "output", "weighted"])
def test_a_known_length_gives_the_same_index_as_the_array_arithmetic(cost: str) -> None:
    """certain_remaining (a point of probability 1: no prediction attached) is the float the numpy path gives."""
    costs = CostDistribution.of(LengthDistribution.point(77), 123, cost)  # type: ignore[arg-type]
    for attained in (0.0, 1.0, 5.5, float(costs.costs[0]) - 1e-9, float(costs.costs[0]), 1e12):
        ahead, probs = costs.tail(attained)
        if ahead.size == 0:
            expected_gittins = expected_mean = None
        else:
            done = np.cumsum(probs)
            expected_gittins = float(((np.cumsum(probs * ahead) + ahead * (done[-1] - done)) / done).min())
            expected_mean = float(np.dot(ahead, probs) / probs.sum())
        assert gittins_index(costs, attained) == expected_gittins
        assert costs.mean_remaining(attained) == expected_mean
