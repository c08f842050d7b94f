"""Seed 000's semantic scheduling and its HPJF baseline: ordering, the queue's head, stage-aware batching,
priority eviction and the cache-or-recompute decisions (eq. 3 and the minimiser of eq. 5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from semsched.core.plan import PreemptionMode, StepResult
from semsched.core.policy import SchedulerView, StepBudget
from semsched.core.request import LengthDistribution, Request, RequestState
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency import load_profile
from semsched.policies import make_policy
from semsched.policies import semantic as semantic_module
from semsched.policies.semantic import Semantic, SemanticConfig, urgency_level
from tests.policies.factories import displaced_by, service_order
from tests.support import make_request, random_requests, run_checked, simulate

# a profile with round numbers, so that the decisions below can be worked out by hand
ROUND_PROFILE = """\
kind: analytic
name: round-numbers
coefficients:
  alpha1: 0.0
  alpha2: {alpha2}
  gamma1: {gamma1}
  gamma2: {gamma2}
  beta: {beta}
"""


def _profile(tmp_path: Path, *, alpha2: float = 1.0, gamma1: float = 0.0, gamma2: float = 1.0,
             beta: float = 1.0) -> str:
    path = tmp_path / "round.yaml"
    path.write_text(ROUND_PROFILE.format(alpha2=alpha2, gamma1=gamma1, gamma2=gamma2, beta=beta))
    return str(path)


def _urgent(request_id: str, urgency: int, **fields: object) -> Request:
    return make_request(request_id, urgency=urgency, **fields)  # type: ignore[arg-type]


def test_hpjf_serves_the_most_urgent_level_first_fcfs_within() -> None:
    requests = [_urgent("late-urgent", 0, arrival=0.03), _urgent("early-calm", 3, arrival=0.0),
                _urgent("early-urgent", 0, arrival=0.01), _urgent("mid", 1, arrival=0.02, output=1)]
    # the first arrival runs alone first (nothing else is there yet); then by level, then by arrival
    order = service_order("hpjf", requests)
    assert order[1:] == ["early-urgent", "late-urgent", "mid"]


def test_hpjf_falls_back_to_the_priority() -> None:
    assert urgency_level(make_request("a", priority=2)) == 2
    assert urgency_level(make_request("b", priority=2, urgency=0)) == 0


def test_semantic_orders_a_level_by_estimated_remaining_time() -> None:
    policy = make_policy("semantic:length=predicted")
    long = _urgent("long", 1, output=400)
    short_by_prediction = _urgent("short", 1, output=400, predicted_output=LengthDistribution.point(20))
    urgent_but_long = _urgent("urgent", 0, output=500)
    keys = {r.request_id: policy.waiting_key(r, 0.0) for r in (long, short_by_prediction, urgent_but_long)}
    assert sorted(keys, key=keys.__getitem__) == ["urgent", "short", "long"]
    oracle = make_policy("semantic:length=oracle")
    assert oracle.waiting_key(short_by_prediction, 0.0) == oracle.waiting_key(long, 0.0)


def test_remaining_time_prices_prompt_decode_and_reload(tmp_path: Path) -> None:
    policy = Semantic(SemanticConfig(profile=_profile(tmp_path, alpha2=0.5, gamma1=0.0, gamma2=2.0, beta=0.25)))
    fresh = make_request("fresh", prompt=10, output=3)
    assert policy.remaining_time_s(fresh) == pytest.approx(10 * 0.5 + 3 * 2.0)
    swapped = make_request("swapped", prompt=10, output=3)
    swapped.num_computed_tokens, swapped.state = 10, RequestState.PREEMPTED_SWAPPED
    assert policy.remaining_time_s(swapped) == pytest.approx(10 * 0.25 + 3 * 2.0)


def test_an_urgent_arrival_displaces_only_less_urgent_work() -> None:
    running = [_urgent("calm", 4, prompt=64, output=50), _urgent("peer", 1, prompt=64, output=50)]
    arrival = _urgent("urgent", 1, prompt=64, output=5, arrival=0.5)
    assert displaced_by("semantic", running, arrival, num_gpu_blocks=34) == ["calm"]
    arrival = _urgent("more-urgent", 0, prompt=128, output=5, arrival=0.5)
    assert displaced_by("semantic", running, arrival, num_gpu_blocks=34)[0] == "calm"
    assert displaced_by("semantic:preempt=false", running, arrival, num_gpu_blocks=34) == []


class _Watched(Semantic):
    """Semantic, checking at every eviction that no less urgent request stays resident, and at every step that
    its view of the queue's head is the best waiting key."""

    scheduler: Scheduler
    evictions = 0

    def on_preempt(self, request: Request, now_s: float) -> None:
        resident = [r for r in self.scheduler.running_requests() if r is not request]
        assert all(urgency_level(r) <= urgency_level(request) for r in resident), "evicted a more urgent one"
        self.evictions += 1
        super().on_preempt(request, now_s)

    def step_budget(self, view, now_s):  # type: ignore[no-untyped-def]
        waiting = self.scheduler.waiting_requests()
        head = self._queue_head()
        if waiting:
            assert head == min(self.waiting_key(r, now_s) for r in waiting)
        else:
            assert head is None
        return super().step_budget(view, now_s)


@pytest.mark.parametrize("stage_aware", ["budget", "level", "strict"])
def test_eviction_and_queue_invariants_under_pressure(stage_aware: str) -> None:
    rng = np.random.default_rng(7)
    requests = [
        _urgent(str(i), int(rng.integers(0, 5)), prompt=int(rng.integers(8, 120)), output=int(rng.integers(1, 60)),
                arrival=float(i // 10) * 0.05)
        for i in range(120)
    ]
    policy = _Watched(SemanticConfig(stage_aware=stage_aware))  # type: ignore[arg-type]
    scheduler = Scheduler(SchedulerConfig(block_size=4, num_gpu_blocks=120, num_cpu_blocks=400, watermark=0.0,
                                          max_num_seqs=16, max_num_batched_tokens=256), policy)
    policy.scheduler = scheduler
    run_checked(scheduler, requests)
    assert policy.evictions > 0  # the scenario does exercise eviction
    assert all(r.state is RequestState.FINISHED for r in requests)  # nothing lost across push-backs


def test_stage_aware_holds_back_new_prompts_while_the_most_important_decodes() -> None:
    scheduler = Scheduler(SchedulerConfig(block_size=4, num_gpu_blocks=1000, watermark=0.0),
                          make_policy("semantic:stage_aware=level"))
    urgent = _urgent("urgent", 0, prompt=16, output=20)
    scheduler.add_request(urgent, 0.0)
    plan = scheduler.schedule(0.0)
    scheduler.update(plan, StepResult(end_time_s=0.1))
    assert urgent.num_output_tokens == 1  # decoding from now on
    calm, peer = _urgent("calm", 3, prompt=16, output=5), _urgent("peer", 0, prompt=16, output=400)
    scheduler.add_request(calm, 0.1)
    plan = scheduler.schedule(0.1)
    assert [r.request_id for r in plan.requests()] == ["urgent"]  # the less urgent prompt waits
    scheduler.update(plan, StepResult(end_time_s=0.2))
    scheduler.add_request(peer, 0.2)
    plan = scheduler.schedule(0.2)
    # a prompt of the decoding request's own level joins, the less urgent one still waits; the paper's strict
    # rule holds back both
    assert [c.request.request_id for c in plan.prefill] == ["peer"] and plan.decode == [urgent]
    strict = Scheduler(SchedulerConfig(block_size=4, num_gpu_blocks=1000, watermark=0.0),
                       make_policy("semantic:stage_aware=strict"))
    urgent2, peer2 = _urgent("urgent", 0, prompt=16, output=20), _urgent("peer", 0, prompt=16, output=400)
    strict.add_request(urgent2, 0.0)
    strict.update(strict.schedule(0.0), StepResult(end_time_s=0.1))
    strict.add_request(peer2, 0.1)
    assert [r.request_id for r in strict.schedule(0.1).requests()] == ["urgent"]


def test_waiting_urgent_work_takes_the_tokens_of_less_urgent_running_prompts() -> None:
    scheduler = Scheduler(SchedulerConfig(block_size=4, num_gpu_blocks=1000, watermark=0.0,
                                          max_num_batched_tokens=64), make_policy("semantic"))
    calm = _urgent("calm", 4, prompt=1000, output=5)
    scheduler.add_request(calm, 0.0)
    scheduler.update(scheduler.schedule(0.0), StepResult(end_time_s=0.1))  # 64 of its 1,000 prompt tokens
    urgent = _urgent("urgent", 0, prompt=60, output=5)
    scheduler.add_request(urgent, 0.1)
    plan = scheduler.schedule(0.1)
    chunks = {c.request.request_id: c.num_tokens for c in plan.prefill}
    assert chunks == {"urgent": 60}  # the calm prompt keeps its KV but computes nothing while urgent work waits
    fcfs = Scheduler(SchedulerConfig(block_size=4, num_gpu_blocks=1000, watermark=0.0,
                                     max_num_batched_tokens=64), make_policy("hpjf"))
    calm2, urgent2 = _urgent("calm", 4, prompt=1000, output=5), _urgent("urgent", 0, prompt=60, output=5)
    fcfs.add_request(calm2, 0.0)
    fcfs.update(fcfs.schedule(0.0), StepResult(end_time_s=0.1))
    fcfs.add_request(urgent2, 0.1)
    assert [c.request.request_id for c in fcfs.schedule(0.1).prefill] == ["calm"]  # hpjf: running first


# ---- cache or recompute --------------------------------------------------------------------------------------
def _evicted(prompt: int, decoded: int) -> Request:
    request = make_request("victim", prompt=prompt, output=decoded + 10)
    request.num_computed_tokens, request.num_output_tokens = prompt + decoded, decoded
    return request


def test_prefill_pricing_keeps_all_or_nothing(tmp_path: Path) -> None:
    # recomputing c tokens in one pass costs alpha2*c = 1.0*c; keeping them costs a copy out and back, 2*beta*c
    cheap_copy = Semantic(SemanticConfig(profile=_profile(tmp_path, alpha2=1.0, beta=0.4)))
    request = _evicted(prompt=100, decoded=30)
    assert cheap_copy.tokens_to_keep(request) == 130  # 2 * 0.4 < 1.0
    assert cheap_copy.preemption_mode(request, None) is PreemptionMode.SWAP  # type: ignore[arg-type]
    dear_copy = Semantic(SemanticConfig(profile=_profile(tmp_path, alpha2=1.0, beta=0.6)))
    assert dear_copy.tokens_to_keep(request) == 0  # 2 * 0.6 > 1.0
    assert dear_copy.preemption_mode(request, None) is PreemptionMode.RECOMPUTE  # type: ignore[arg-type]


def test_the_papers_token_pricing_follows_eq3_and_eq5(tmp_path: Path) -> None:
    # eq. 3 keeps the prompt iff beta*n < alpha2*n: beta 0.5 < alpha2 1. Eq. 5 with gamma1 = 0.01, gamma2 = 0,
    # n = 100: f(x) = 0.5x + 0.01(y^2/2 + 100y + y/2), y = m' - x; f'(x) = 0.5 - 0.01(y + 100.5) = 0 at
    # y = -50.5 < 0: re-decoding even one token costs more than reloading it, so every decoded token is kept.
    policy = Semantic(SemanticConfig(profile=_profile(tmp_path, alpha2=1.0, gamma1=0.01, gamma2=0.0, beta=0.5),
                                     recompute_cost="token"))
    assert policy.tokens_to_keep(_evicted(prompt=100, decoded=40)) == 140
    # beta 2: keep the prompt? 2 > 1, no -> nothing is kept (decoded KV needs its prompt's)
    no_prompt = Semantic(SemanticConfig(profile=_profile(tmp_path, alpha2=1.0, gamma1=0.01, beta=2.0),
                                        recompute_cost="token"))
    assert no_prompt.tokens_to_keep(_evicted(prompt=100, decoded=40)) == 0
    # alpha2 3 keeps the prompt at beta 2; gamma1 0.01, n 100: y* = (beta - gamma2)/gamma1 - n - 1/2
    # = 200 - 100.5 = 99.5 -> with m' = 150 decoded, x* = 150 - 99.5 = 50.5: 50 or 51, the cheaper of the two
    partial = Semantic(SemanticConfig(profile=_profile(tmp_path, alpha2=3.0, gamma1=0.01, gamma2=0.0, beta=2.0),
                                      recompute_cost="token"))
    kept = partial.tokens_to_keep(_evicted(prompt=100, decoded=150)) - 100

    def eq5(x: int) -> float:
        y = 150 - x
        return 2.0 * x + 0.01 * (0.5 * y * y + 100 * y + 0.5 * y)

    assert kept in (50, 51) and eq5(kept) == min(eq5(50), eq5(51))


def test_token_pricing_needs_an_analytic_profile() -> None:
    load_profile("a100-qwen1.5-7b-batch")  # a profile of another kind exists
    policy = Semantic(SemanticConfig(profile="a100-qwen1.5-7b-batch", recompute_cost="token"))
    with pytest.raises(ValueError, match="analytic profile"):
        policy.tokens_to_keep(_evicted(prompt=10, decoded=5))


def test_budget_mode_slows_less_urgent_prompts_without_stopping_them() -> None:
    scheduler = Scheduler(SchedulerConfig(block_size=4, num_gpu_blocks=1000, watermark=0.0),
                          make_policy("semantic:stage_prefill_tokens=24"))
    urgent = _urgent("urgent", 0, prompt=16, output=20)
    scheduler.add_request(urgent, 0.0)
    scheduler.update(scheduler.schedule(0.0), StepResult(end_time_s=0.1))
    calm = _urgent("calm", 3, prompt=100, output=5)
    scheduler.add_request(calm, 0.1)
    plan = scheduler.schedule(0.1)
    assert plan.decode == [urgent]
    assert [(c.request.request_id, c.num_tokens) for c in plan.prefill] == [("calm", 24)]
    with pytest.raises(ValueError, match="stage_prefill_tokens must be an integer from 1"):
        make_policy("semantic:stage_prefill_tokens=0")


@pytest.mark.parametrize(
    ("config", "num_priorities", "urgent"),
    [({"max_num_seqs": 4}, 1, False),  # sequence slots full, one level: the head can neither start nor displace
     ({"num_gpu_blocks": 60}, 1, False),  # KV-bound
     ({"max_num_seqs": 4}, 3, True),  # levels mixed, some urgent arrivals: displacement may come back
     ({"num_gpu_blocks": 60, "max_num_seqs": 6}, 3, False)],
)
def test_decode_stretches_with_a_stuck_queue_fast_forward_exactly(
    config: dict[str, int], num_priorities: int, urgent: bool
) -> None:
    """While the head of the queue can neither start nor displace anyone, decode-only steps repeat: they
    fast-forward with requests waiting, and every request ends exactly as stepping one by one makes it end."""
    outcomes, events = [], []
    for fast_forward in (True, False):
        requests = random_requests(7, 40, rate=50.0, max_prompt=64, max_output=80, num_priorities=num_priorities)
        if urgent:
            for request in requests[::5]:
                request.urgency = 0
        result = simulate(requests, "semantic", fast_forward=fast_forward, block_size=4, **config)
        outcomes.append([(r.state, r.num_preemptions, r.token_times_s().tolist()) for r in requests])
        events.append(result.num_events)
    assert outcomes[0] == outcomes[1]
    assert events[0] < events[1]


def test_the_queue_head_that_may_displace_stops_the_stretch() -> None:
    """A waiting request more urgent than a running one may displace it once that one holds enough blocks: the
    policy promises no stable stretch then; when no running request is less urgent, it does (no free slot)."""
    for background, stable in ((2, False), (1, True)):
        scheduler = Scheduler(SchedulerConfig(max_num_seqs=2, block_size=4, num_gpu_blocks=40),
                              make_policy("semantic"))
        scheduler.add_request(make_request("a", prompt=100, output=50, priority=1), 0.0)
        scheduler.add_request(make_request("b", prompt=8, output=50, priority=background), 0.0)
        plan = scheduler.schedule(0.0)
        scheduler.update(plan, StepResult(end_time_s=0.01))
        scheduler.add_request(make_request("c", prompt=100, output=5, priority=1, arrival=0.01), 0.01)
        plan = scheduler.schedule(0.01)  # c needs 25 blocks: the 11 free and b's 3 are not enough
        assert plan.is_pure_decode and len(plan.decode) == 2 and scheduler.num_waiting == 1
        assert scheduler.policy.stable_between_events is stable


@pytest.mark.parametrize("length", ["predicted", "oracle"])
def test_a_running_decodes_key_is_its_remaining_time(length: str) -> None:
    """The key's inlined path for running decodes prices what remaining_time_s prices, bit for bit (with and
    without a predicted distribution), and a cached key follows the request's progress."""
    policy = make_policy(f"semantic:length={length}")
    assert isinstance(policy, Semantic)
    rng = np.random.default_rng(3)
    for i in range(200):
        prompt, output = int(rng.integers(1, 4000)), int(rng.integers(1, 900))
        request = make_request(f"r{i}", prompt=prompt, output=output, priority=int(rng.integers(0, 3)))
        if i % 2:
            request.predicted_output = LengthDistribution((max(1, output // 2), output + 50), (0.3, 0.7))
        request.state = RequestState.RUNNING
        request.num_output_tokens = int(rng.integers(0, output))
        request.num_computed_tokens = prompt + request.num_output_tokens - 1  # its next token is a decode
        key = policy.victim_key(request)
        assert key == (float(urgency_level(request)), policy.remaining_time_s(request), request.arrival_time_s)
        request.num_output_tokens += 1
        request.num_computed_tokens += 1
        assert policy.victim_key(request)[1] == policy.remaining_time_s(request)


@pytest.mark.parametrize("length", ["predicted", "oracle"])
def test_the_steps_scan_keeps_each_running_requests_key(length: str) -> None:
    """The keys the step's scan computes inline for running decodes are remaining_time_s's, bit for bit, and its
    summary (the smallest key, whether its request decodes, the prompt tokens of the most urgent level beyond
    one each) is that of those keys."""
    rng = np.random.default_rng(5)
    for _ in range(30):
        policy = make_policy(f"semantic:length={length}")
        assert isinstance(policy, Semantic)
        running = []
        for i in range(int(rng.integers(1, 30))):
            prompt, output = int(rng.integers(1, 2000)), int(rng.integers(1, 500))
            request = make_request(f"r{i}", prompt=prompt, output=output, priority=int(rng.integers(0, 3)),
                                   arrival=float(rng.integers(0, 4)), urgency=[None, 0, 2][i % 3])
            if rng.random() < 0.5:
                request.predicted_output = LengthDistribution((max(1, output // 2), output + 50), (0.3, 0.7))
            request.state = RequestState.RUNNING
            request.num_output_tokens = int(rng.integers(0, output))
            decoding = request.num_output_tokens > 0 and rng.random() < 0.8
            request.num_computed_tokens = (request.num_tokens - 1 if decoding
                                           else int(rng.integers(0, request.num_tokens - 1)))
            running.append(request)
        best, best_decoding, extra = policy._scan_running(running, fresh=True)
        keys = [policy.victim_key(r) for r in running]  # (kept by the scan)
        assert keys == [(float(urgency_level(r)), policy.remaining_time_s(r), r.arrival_time_s) for r in running]
        first = min(range(len(keys)), key=keys.__getitem__)
        assert (best, best_decoding) == (keys[first], running[first].num_uncomputed_tokens <= 1)
        top = min(key[0] for key in keys)
        assert extra == sum(r.num_uncomputed_tokens - 1 for r, key in zip(running, keys, strict=True)
                            if key[0] == top and r.num_uncomputed_tokens > 1)
        # what the step notes: whether the list is in key order (its stable sort keeps it), its prompts' level
        scanned = policy._scanned
        assert scanned.describes(running)
        assert scanned.in_order == (sorted(running, key=policy.victim_key) == running)
        assert scanned.prompt_level == max((key[0] for r, key in zip(running, keys, strict=True)
                                            if r.num_uncomputed_tokens > 1), default=-np.inf)
        if rng.random() < 0.5:  # a list in key order
            running.sort(key=policy.victim_key)
            policy._scan_running(running, fresh=True)
            assert policy._scanned.in_order



def _decoding(rng: np.random.Generator, name: str, levels: int) -> Request:
    """A running decode: contexts spread wide and remaining outputs close, so that neighbours in key order cross
    within tens of tokens (a larger context loses time faster)."""
    prompt, output = int(rng.choice([8, 64, 512, 2000, 6000])), int(rng.integers(20, 90))
    request = make_request(name, prompt=prompt, output=output, priority=int(rng.integers(0, levels)),
                           arrival=float(rng.integers(0, 3)))
    request.state = RequestState.RUNNING
    request.num_output_tokens = int(rng.integers(1, output // 2))
    request.num_computed_tokens = request.num_tokens - 1
    return request


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("context_heavy", [False, True])
def test_a_certificate_covers_only_steps_whose_list_is_still_in_key_order(
    tmp_path: Path, seed: int, context_heavy: bool
) -> None:
    """Where a certificate says a later step's decodes are still in key order, the full scan finds them so, with
    the same smallest key. Steps: uniform advances (a token or several each), advances that fall along the list
    (a token budget below the batch), out-of-step advances and a prompt (a recompute) among them; with exact
    ties, and on a profile where the context prices a decode as much as its length (neighbours cross within
    tens of tokens: where the certificate's limit is what turns a step away)."""
    rng = np.random.default_rng(seed)
    profile = _profile(tmp_path, gamma1=3.7e-5, gamma2=0.0119) if context_heavy else "a100-qwen1.5-4b"
    covered = refused = 0
    crossed = [0, 0, 0, 0]  # by kind of step
    for trial in range(150):
        length = "oracle" if trial % 2 else "predicted"
        policy = make_policy(f"semantic:length={length};profile={profile}")
        assert isinstance(policy, Semantic)
        running = [_decoding(rng, f"r{i}", levels=1 + trial % 3) for i in range(int(rng.integers(2, 25)))]
        for twin in running[: int(rng.integers(0, 3))]:  # exact ties: the same costs at every step
            copy = make_request(f"{twin.request_id}-twin", prompt=twin.prompt_tokens,
                                output=twin.target_output_tokens, priority=twin.priority,
                                arrival=twin.arrival_time_s + 1.0)
            copy.state, copy.num_output_tokens = RequestState.RUNNING, twin.num_output_tokens
            copy.num_computed_tokens = twin.num_computed_tokens
            running.append(copy)
        running.sort(key=policy.victim_key)
        policy._keys.clear()
        policy._scan_running(running, fresh=True)
        certificate = policy._certify(running)
        if certificate is None:  # neighbours that cross at the next token (never on the default profile)
            assert context_heavy
            continue
        for _ in range(int(rng.integers(1, 40))):
            kind = int(rng.choice(4, p=[0.45, 0.35, 0.1, 0.1]))
            if kind == 0:  # the same tokens each
                advances = [int(rng.integers(1, 4))] * len(running)
            elif kind == 1:  # the first few get a token (a token budget below the batch)
                served = int(rng.integers(0, len(running) + 1))
                advances = [1 if i < served else 0 for i in range(len(running))]
            elif kind == 2:  # out of step: any request may get any count
                advances = [int(a) for a in rng.integers(0, 3, len(running))]
            else:  # a prompt (a recompute) among them
                advances = [0] * len(running)
                running[int(rng.integers(0, len(running)))].num_computed_tokens = 0
            for request, advance in zip(running, advances, strict=True):
                request.num_output_tokens += advance
                request.num_computed_tokens += advance
            policy._keys.clear()
            certified = policy._certified_scan(running, certificate)
            policy._keys.clear()
            best, best_decoding, extra = policy._scan_running(running, fresh=True)
            in_order = policy._scanned.in_order
            if certified is not None:
                covered += 1
                assert in_order and (certified, best_decoding, extra) == (best, True, 0)
                assert policy._scanned.prompt_level == -np.inf
            else:
                refused += 1
            if not in_order:
                crossed[kind] += 1
                break
    # (each outcome common, so the test can fail either way: a certificate covering a crossed list, or none)
    assert covered > 300 and refused > 100, (covered, refused)
    if context_heavy:  # crossed by steps the certificate turned away on its limit alone
        assert crossed[0] > 10 and crossed[1] > 0, crossed


@pytest.mark.parametrize("context_heavy", [False, True])
def test_steps_priced_by_certificate_run_as_steps_that_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context_heavy: bool
) -> None:
    """A simulation whose batches stay put for stretches of decodes runs the same, request by request, with the
    certificates as with every step scanning its running list, at each stage-aware mode, and what each certified
    step finds is what the scan finds; the certificates are used. Also on a profile where the context prices a
    decode as much as its length (decodes overtake one another within tens of tokens). And the admission cap
    that a displacement asks for (level, strict) is step_budget's, as scanning the running list again finds."""
    profile = (_profile(tmp_path, alpha2=1e-4, gamma1=3.7e-4, gamma2=0.0119, beta=1e-5) if context_heavy
               else "a100-qwen1.5-4b")
    used = 0
    certified_scan = Semantic._certified_scan

    def counting(self: Semantic, running: list[Request], certificate: object) -> object:
        nonlocal used
        best = certified_scan(self, running, certificate)  # type: ignore[arg-type]
        if best is not None:  # what a scan of every request finds (it keeps the same keys and notes)
            used += 1
            scanned = self._scan_running(running, fresh=True)
            assert self._scanned.in_order and scanned == (best, True, 0)
        return best

    def rescanning_cap(self: Semantic, view: SchedulerView, now_s: float) -> int | None:
        best, best_decoding, _ = self._scan_running(view.running_requests())
        return self._cap_for(best, best_decoding, view)

    # a certificate at every scan that may build one, however short the list or its use (what they cost is not
    # what is checked here)
    monkeypatch.setattr(semantic_module, "_CERTIFICATE_PAYS", 0)
    monkeypatch.setattr(semantic_module, "_MIN_CERTIFIED_RUNNING", 1)
    for stage_aware in ("budget", "level", "strict", "off"):
        outcomes = []
        for certify, reuse in ((True, True), (False, True), (False, False)):
            with monkeypatch.context() as patch:
                patch.setattr(Semantic, "_certified_scan", counting)
                if not certify:
                    patch.setattr(Semantic, "_certify", lambda self, running: None)
                if not reuse:
                    patch.setattr(Semantic, "_admission_cap", rescanning_cap)
                requests = random_requests(3, 120, rate=400.0, max_prompt=300, max_output=400, num_priorities=2)
                for request in requests[::7]:
                    request.urgency = 0
                simulate(requests, f"semantic:length=oracle;stage_aware={stage_aware};profile={profile}",
                         fast_forward=False, max_num_seqs=24, max_num_batched_tokens=64)
            outcomes.append([(r.state, r.num_preemptions, r.first_scheduled_time_s, r.finish_time_s)
                             for r in requests])
        assert outcomes[0] == outcomes[1] == outcomes[2]
    assert used > 500


class _CapView:
    """What semantic's admission cap reads of an engine: its running requests, waiting count and budget."""

    def __init__(self, running: list[Request], num_waiting: int) -> None:
        self.running, self.num_waiting, self.block_size = running, num_waiting, 16
        self.budget = StepBudget(2048, 256)

    def running_requests(self) -> list[Request]:
        return self.running

    @property
    def num_running(self) -> int:
        return len(self.running)


def _rescanned_cap(policy: Semantic, view: _CapView) -> int | None:
    best, best_decoding, _ = policy._scan_running(view.running_requests())
    return policy._cap_for(best, best_decoding, view)  # type: ignore[arg-type]


def test_the_admission_cap_is_the_steps_only_for_the_steps_running_list() -> None:
    """A displacement's admission cap (stage_aware=level) reuses step_budget's smallest key while the running list
    is the one it scanned at that time. At a later time with no step_budget asked (an engine that did not ask it
    first), or after a displacement took a request out, it is what scanning the list again finds: here, each time
    not what the step found."""
    policy = make_policy("semantic:length=oracle;stage_aware=level")
    assert isinstance(policy, Semantic)
    head = make_request("head", prompt=16, output=50, priority=1, arrival=5.0)
    policy.on_arrival(head, 5.0)
    first = make_request("first", prompt=16, output=200, priority=1)
    other = make_request("other", prompt=16, output=200, priority=2)
    for request in (first, other):
        request.state, request.num_output_tokens = RequestState.RUNNING, 100
        request.num_computed_tokens = request.num_tokens - 1
    view = _CapView([first, other], num_waiting=1)

    def cap(now_s: float) -> int | None:
        return policy._admission_cap(view, now_s)  # type: ignore[arg-type]

    policy.step_budget(view, 10.0)  # type: ignore[arg-type]
    assert cap(10.0) == _rescanned_cap(policy, view) is None  # the head ranks first: nothing held back
    # later, no step_budget asked: "first" has nearly finished and now ranks before the head (its level's
    # waiting request may join)
    first.num_output_tokens, first.num_computed_tokens = 190, first.num_computed_tokens + 90
    assert cap(11.0) == _rescanned_cap(policy, view) == 3
    policy.step_budget(view, 12.0)  # type: ignore[arg-type]
    assert cap(12.0) == 3
    # a displacement takes "first" out: the smallest key is a less urgent level's, and the head ranks first
    first.state = RequestState.PREEMPTED_RECOMPUTE
    view.running = [other]
    assert cap(12.0) == _rescanned_cap(policy, view) is None
