"""The stress matrix (issue 28): every registered policy through the workloads that strand work, in both modes.

The policies come from the registry, so a new policy is covered without editing this file. Each scenario runs
twice per policy, fast-forward on and off, and must end with:

* every request FINISHED with all its tokens, or REJECTED or DROPPED with a reason (``finish_reason``);
* no scheduler holding running, waiting or swapped work, and every GPU and CPU block free;
* the same state, reason, preemption count and token times for every request in both modes.

Each registered policy states in its class docstring what it guarantees about starvation (one line,
``starvation: none | bounded ... | possible ...``; docs/starvation.md lists them). The claims are checked here:
a policy that says ``none`` starts the requests of one instance in arrival order; one that says ``bounded`` has a
check in :data:`BOUND_CHECKS`, run on the ``sustained-stream`` scenario (a long, unimportant request among a
stream of short, important ones that arrive a little faster than one slot serves them: the request every
``possible`` policy starves).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from semsched.core.plan import PreemptionMode
from semsched.core.policy import Policy
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import SchedulerConfig
from semsched.latency import load_profile
from semsched.policies import POLICIES
from semsched.policies.fastserve import FastServe, FastServeConfig
from semsched.policies.tiered import Tiered
from semsched.policies.utility import Utility
from semsched.policies.vtc import VTC, client_of
from semsched.sim.disagg import PDSpec
from semsched.sim.engine import SimResult, Simulation
from semsched.sim.runner import ClusterSpec, build_simulation
from semsched.sim.speculative import speculation_preset
from tests.policies.predicted import with_predictions
from tests.support import make_request

POLICY_NAMES = POLICIES.names()
STARVATION_LINE = re.compile(r"^\s*starvation: (none|bounded|possible)\b", re.MULTILINE)

#: the sustained-stream scenario: its long request, and the engine it runs on (one sequence at a time)
LONG_ID = "long"
STREAM_PROFILE = "a100-qwen1.5-4b"


@dataclass(frozen=True)
class Scenario:
    """One workload on one cluster; ``requests`` builds fresh requests for each run."""

    name: str
    requests: Callable[[], list[Request]]
    cluster: ClusterSpec

    @property
    def single_instance(self) -> bool:
        return self.cluster.pd is None and self.cluster.num_instances == 1


# ---- workloads ------------------------------------------------------------------------------------------------
def _requests(seed: int, prompts: np.ndarray, outputs: np.ndarray, arrivals: np.ndarray) -> list[Request]:
    """Requests of the given sizes and arrivals, priorities 0-3, three in four with SLOs (deadline policies see
    finite and infinite deadlines), most with a predicted length distribution (tests/policies/predicted.py)."""
    rng = np.random.default_rng(seed + 1)
    requests = []
    for i, (prompt, output, arrival) in enumerate(zip(prompts, outputs, arrivals, strict=True)):
        slos = rng.random() < 0.75
        requests.append(make_request(
            f"r{i}", prompt=int(prompt), output=int(output), arrival=float(arrival),
            priority=int(rng.integers(0, 4)), ttft_slo_s=2.0 if slos else None, tpot_slo_s=0.1 if slos else None,
            e2e_slo_s=60.0 if slos else None,
        ))
    return with_predictions(requests, seed)


def _poisson(rng: np.random.Generator, count: int, rate: float) -> np.ndarray:
    return np.cumsum(rng.exponential(1.0 / rate, count))


def long_context(capacity_tokens: int, seed: int = 0) -> list[Request]:
    """Eight requests whose whole sequence is 50-90 % of the KV capacity (one 90 %), among sixteen short ones, at
    2/s."""
    rng = np.random.default_rng(seed)
    totals = rng.integers(capacity_tokens // 2, int(0.9 * capacity_tokens) + 1, 8)
    totals[0] = int(0.9 * capacity_tokens)
    long_outputs = rng.integers(8, 65, 8)
    prompts = np.concatenate([totals - long_outputs, rng.integers(16, 257, 16)])
    outputs = np.concatenate([long_outputs, rng.integers(8, 129, 16)])
    order = rng.permutation(24)
    return _requests(seed, prompts[order], outputs[order], _poisson(rng, 24, 2.0))


def kv_exhaustion(seed: int = 1) -> list[Request]:
    """Forty requests at 20/s whose outputs outgrow a small cache: preemptions under KV pressure."""
    rng = np.random.default_rng(seed)
    return _requests(seed, rng.integers(32, 257, 40), rng.integers(32, 301, 40), _poisson(rng, 40, 20.0))


def burst(count: int = 500, seed: int = 2) -> list[Request]:
    """``count`` short requests at once."""
    rng = np.random.default_rng(seed)
    return _requests(seed, rng.integers(8, 129, count), rng.integers(1, 25, count), np.zeros(count))


def heavy_tail(seed: int = 3) -> list[Request]:
    """Forty requests at 4/s with lognormal outputs (median 40 tokens, sigma 1.5), capped at 3,000 tokens."""
    rng = np.random.default_rng(seed)
    outputs = np.clip(rng.lognormal(math.log(40.0), 1.5, 40), 1, 3000).astype(int)
    return _requests(seed, rng.integers(16, 513, 40), outputs, _poisson(rng, 40, 4.0))


def speculative(draft_tokens: int, seed: int = 4) -> list[Request]:
    """Twenty-four requests at 8/s, each replaying a small synthetic log of 5-60 rounds of 1 to
    ``draft_tokens + 1`` tokens (its output: the prefill's token plus every round's)."""
    rng = np.random.default_rng(seed)
    logs = [tuple(int(v) for v in rng.integers(1, draft_tokens + 2, rng.integers(5, 61))) for _ in range(24)]
    outputs = np.array([1 + sum(log) for log in logs])
    requests = _requests(seed, rng.integers(16, 257, 24), outputs, _poisson(rng, 24, 8.0))
    for request, log in zip(requests, logs, strict=True):
        request.accept_lengths = log
    return requests


def pd_traffic(seed: int = 5) -> list[Request]:
    """Forty requests at 8/s for a PD cluster."""
    rng = np.random.default_rng(seed)
    return _requests(seed, rng.integers(16, 513, 40), rng.integers(8, 201, 40), _poisson(rng, 40, 8.0))


def tiny_cache_traffic(capacity_tokens: int, seed: int = 6) -> list[Request]:
    """Thirty requests at 10/s on a cache of ``capacity_tokens``, a few larger than all of it (rejected)."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(16, 601, 30)
    prompts[[3, 17]] = capacity_tokens + 1, 2 * capacity_tokens
    return _requests(seed, prompts, rng.integers(8, 401, 30), _poisson(rng, 30, 10.0))


def short_service_s(prompt: int, output: int) -> float:
    """How long a short request of the stream holds the engine alone: its prefill, then its decodes."""
    latency = load_profile(STREAM_PROFILE)
    decodes = sum(latency.step_time_s([], 1, prompt + k) for k in range(1, output))
    return latency.step_time_s([(prompt, 0)], 0, 0) + decodes


def sustained_stream(duration_s: float = 16.0) -> list[Request]:
    """On one sequence slot: short, most important requests arriving 5 % faster than the slot serves them for
    ``duration_s``, and one long, least important request (its own client) just after the first of them."""
    prompt, output = 64, 16
    gap_s = 0.95 * short_service_s(prompt, output)
    shorts = [make_request(f"s{i}", prompt=prompt, output=output, arrival=i * gap_s, priority=0, client="short",
                           ttft_slo_s=1.0, tpot_slo_s=0.05, e2e_slo_s=5.0)
              for i in range(int(duration_s / gap_s))]
    long = make_request(LONG_ID, prompt=4000, output=200, arrival=gap_s / 2, priority=3, client="long")
    return [shorts[0], long, *shorts[1:]]


def _cluster(profile: str = "a100-qwen1.5-4b", **config: object) -> ClusterSpec:
    return ClusterSpec(profile=profile, scheduler=SchedulerConfig(**config))  # type: ignore[arg-type]


EAGLE = speculation_preset("eagle")

SCENARIOS = [
    Scenario("long-context", lambda: long_context(512 * 16),
             _cluster("a100-qwen1.5-7b-batch", num_gpu_blocks=512, block_size=16)),
    Scenario("kv-exhaustion", kv_exhaustion, _cluster(num_gpu_blocks=96, num_cpu_blocks=0)),
    Scenario("kv-exhaustion-swap", kv_exhaustion, _cluster(num_gpu_blocks=96, num_cpu_blocks=128)),
    Scenario("burst-500", burst, _cluster(num_gpu_blocks=1024, max_num_seqs=64)),
    Scenario("heavy-tail", heavy_tail, _cluster(num_gpu_blocks=2048)),
    Scenario("speculative", lambda: speculative(EAGLE.draft_tokens),
             ClusterSpec(profile="a100-qwen1.5-7b", speculation=EAGLE,
                         scheduler=SchedulerConfig(num_gpu_blocks=256, num_cpu_blocks=64))),
    Scenario("pd-2+2", pd_traffic, ClusterSpec(scheduler=SchedulerConfig(num_gpu_blocks=256), pd=PDSpec(2, 2))),
    Scenario("tiny-kv", lambda: tiny_cache_traffic(64 * 16), _cluster(num_gpu_blocks=64, block_size=16)),
    Scenario("sustained-stream", sustained_stream, _cluster(STREAM_PROFILE, max_num_seqs=1)),
]


# ---- running and checking -------------------------------------------------------------------------------------
Outcome = tuple[str, RequestState, str | None, int, list[float]]


@dataclass
class Run:
    simulation: Simulation
    requests: list[Request]
    result: SimResult

    @property
    def policies(self) -> list[Policy]:
        return [instance.scheduler.policy for instance in self.simulation.instances]

    def outcomes(self) -> list[Outcome]:
        return [(r.request_id, r.state, r.finish_reason, r.num_preemptions, r.token_times_s().tolist())
                for r in self.requests]


def run(policy: str, scenario: Scenario, *, fast_forward: bool) -> Run:
    simulation = build_simulation(policy, scenario.cluster, fast_forward=fast_forward)
    requests = scenario.requests()
    return Run(simulation, requests, simulation.run(requests))


def check_nothing_stranded(result: Run) -> None:
    for request in result.requests:
        where = f"{request.request_id} ({request.prompt_tokens}+{request.target_output_tokens} tokens)"
        assert request.state.is_terminal, f"{where} left {request.state.value}"
        if request.state is RequestState.FINISHED:
            assert len(request.token_times_s()) == request.target_output_tokens, f"{where} lost tokens"
        else:
            assert request.finish_reason, f"{where} {request.state.value} without a reason"
    for index, instance in enumerate(result.simulation.instances):
        scheduler = instance.scheduler
        assert not scheduler.has_unfinished(), f"instance {index} still holds work"
        assert scheduler.kv.num_free_gpu_blocks == scheduler.kv.num_gpu_blocks, f"instance {index} GPU blocks"
        assert scheduler.kv.num_free_cpu_blocks == scheduler.kv.num_cpu_blocks, f"instance {index} CPU blocks"


def starvation_claim(cls: type[Policy]) -> str:
    """What the class's own docstring says of starvation: ``none``, ``bounded`` or ``possible`` ("" if nothing)."""
    match = STARVATION_LINE.search(cls.__dict__.get("__doc__") or "")
    return match.group(1) if match else ""


def starvation_text(cls: type[Policy]) -> str:
    """The whole ``starvation:`` paragraph of the class's docstring, on one line, as docs/starvation.md shows it
    (reStructuredText's double backticks as Markdown's single ones)."""
    doc = cls.__dict__.get("__doc__") or ""
    match = STARVATION_LINE.search(doc)
    if match is None:
        return ""
    paragraph = doc[match.start():].split("\n\n")[0]
    return " ".join(paragraph.split()).replace("``", "`")


def check_arrival_order(result: Run) -> None:
    """``starvation: none``: on one instance no request starts before one that arrived earlier (requests that
    never started, the rejected, excepted; ties in arrival keep the workload's order)."""
    started = [r for r in result.requests if r.first_scheduled_time_s is not None]
    started.sort(key=lambda r: r.arrival_time_s)  # stable: the workload's order breaks ties, as the queue's does
    starts = [r.first_scheduled_time_s for r in started]
    overtaken = [(a.request_id, b.request_id) for a, b in zip(started, started[1:], strict=False)
                 if b.first_scheduled_time_s < a.first_scheduled_time_s]  # type: ignore[operator]
    assert not overtaken, f"started before an earlier arrival: {overtaken[:5]} (of {len(starts)})"


def _stream_parts(result: Run) -> tuple[Request, list[Request]]:
    long = next(r for r in result.requests if r.request_id == LONG_ID)
    return long, [r for r in result.requests if r.request_id != LONG_ID]


def _wait_s(request: Request) -> float:
    assert request.first_scheduled_time_s is not None
    return request.first_scheduled_time_s - request.arrival_time_s


def check_fastserve_bound(result: Run) -> None:
    """A request waiting ``starve_s`` is promoted to level 0 at the next check (every ``check_s``), where only
    earlier arrivals go first. The long request arrived second: it starts once promoted and once the short
    request holding the slot is done (a short one is never demoted: its output fits level 0's quantum)."""
    (policy,) = result.policies
    assert isinstance(policy, FastServe) and policy.config.starve_s > 0
    long, shorts = _stream_parts(result)
    bound_s = fastserve_bound_s(policy.config, shorts)
    assert _wait_s(long) <= bound_s, f"the long request waited {_wait_s(long):.2f} s, bound {bound_s:.2f} s"


def fastserve_bound_s(config: FastServeConfig, shorts: list[Request]) -> float:
    """``starve_s + check_s`` and twice the longest a short request held the slot: once for the one running at
    the promotion, once for the step in flight when the check came due."""
    holding_s = max((r.finish_time_s or math.inf) - _wait_s(r) - r.arrival_time_s for r in shorts)
    return config.starve_s + config.check_s + 2 * holding_s


def check_utility_bound(result: Run) -> None:
    """A request that has waited ``starve_s`` has starved and takes one of the next ``starve_every`` admissions
    (no starved request entered the queue before the long one): it starts within ``starve_s`` and the hold of the
    slot by ``starve_every + 1`` short requests (the one running when it starved, then the admissions before its
    turn)."""
    (policy,) = result.policies
    assert isinstance(policy, Utility) and policy.config.starve_s > 0
    long, shorts = _stream_parts(result)
    holding_s = max((r.finish_time_s or math.inf) - _wait_s(r) - r.arrival_time_s for r in shorts)
    bound_s = policy.config.starve_s + (policy.config.starve_every + 1) * holding_s
    assert _wait_s(long) <= bound_s, f"the long request waited {_wait_s(long):.2f} s, bound {bound_s:.2f} s"


def check_vtc_bound(result: Run) -> None:
    """The fairness bound: while both clients wait, their counters differ by at most ``(I + B·O) / w_min``. The
    long request's client has nothing else, so its counter stands still while it waits: the short client is
    admitted only until its counter passes that bound, a request of input and output cost ``c`` at a time."""
    (policy,) = result.policies
    assert isinstance(policy, VTC)
    long, shorts = _stream_parts(result)
    cfg = policy.config
    weight = {r.request_id: policy.weight(r.priority) for r in result.requests}
    largest_input = max(cfg.input_cost * r.prompt_tokens for r in result.requests)
    largest_output = max(cfg.output_cost * r.target_output_tokens for r in result.requests)
    slots = result.simulation.instances[0].scheduler.config.max_num_seqs
    gap = (largest_input + slots * largest_output) / min(weight.values())
    cheapest = min((cfg.input_cost * r.prompt_tokens + cfg.output_cost * r.target_output_tokens)
                   / weight[r.request_id] for r in shorts)
    assert long.first_scheduled_time_s is not None and {client_of(r) for r in shorts} == {"short"}
    passed = [r for r in shorts if long.arrival_time_s < (r.first_scheduled_time_s or math.inf)
              < long.first_scheduled_time_s]
    allowed = math.floor(gap / cheapest) + slots + 1
    assert len(passed) <= allowed, f"{len(passed)} short requests started while the long one waited ({allowed})"


def check_tiered_fair_share_bound(result: Run) -> None:
    """With a fair share for its class, the request at the head of its class's queue is first scheduled within
    ``share_window_s + rekey_s + 2·L·t`` (``L`` the longest output a running request may produce, ``t`` the
    longest step): the bound tiered's docstring states for ``fair_shares``."""
    (policy,) = result.policies
    assert isinstance(policy, Tiered) and policy.config.fair_shares is not None
    long, shorts = _stream_parts(result)
    longest_output = max(r.target_output_tokens for r in shorts)
    longest_step_s = max(float(np.diff([r.first_scheduled_time_s, *r.token_times_s()]).max()) for r in shorts)
    cfg = policy.config
    bound_s = cfg.share_window_s + cfg.rekey_s + 2 * longest_output * longest_step_s
    assert _wait_s(long) <= bound_s, f"the long request waited {_wait_s(long):.2f} s, bound {bound_s:.2f} s"


#: the check of every policy whose docstring says ``starvation: bounded``, run on the sustained stream
BOUND_CHECKS: dict[str, Callable[[Run], None]] = {
    "fastserve": check_fastserve_bound,
    "vtc": check_vtc_bound,
    "utility": check_utility_bound,
}
#: configurations that turn on a bound a docstring states for them (``possible ...; with X, bounded by ...``)
CONFIGURED_BOUND_CHECKS: dict[str, Callable[[Run], None]] = {
    "tiered:aging_per_s=0;fair_shares=0/0/0/0.1;share_window_s=4;rekey_s=1": check_tiered_fair_share_bound,
    "utility:starve_s=2": check_utility_bound,  # (the default, 60 s, outlasts the stream)
}


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_policy_ends_every_request_alike_in_both_modes(scenario: Scenario, policy: str) -> None:
    fast = run(policy, scenario, fast_forward=True)
    check_nothing_stranded(fast)
    slow = run(policy, scenario, fast_forward=False)
    check_nothing_stranded(slow)
    assert fast.outcomes() == slow.outcomes()
    claim = starvation_claim(POLICIES.get(policy))
    if claim == "none" and scenario.single_instance:
        check_arrival_order(fast)
    if claim == "bounded" and scenario.name == "sustained-stream":
        BOUND_CHECKS[policy](fast)


def test_the_scenarios_do_to_the_engine_what_they_are_named_after() -> None:
    """The matrix is only as strong as its workloads: near-capacity prompts, preemptions (by swap where there is
    swap space), 500 arrivals at once, a heavy tail, several tokens per speculative round, hand-offs to the decode
    pool, rejections for a too small cache."""
    scenarios = {s.name: s for s in SCENARIOS}

    def fcfs(name: str) -> Run:
        return run("fcfs", scenarios[name], fast_forward=True)

    engine = scenarios["long-context"].cluster.scheduler
    longest = max(r.prompt_tokens + r.target_output_tokens for r in fcfs("long-context").requests)
    assert longest == int(0.9 * engine.num_gpu_blocks * engine.block_size)
    for name in ("kv-exhaustion", "kv-exhaustion-swap", "tiny-kv"):
        assert fcfs(name).result.monitor.preemptions, name
    modes = {name: {p.mode for p in run("las", scenarios[name], fast_forward=True).result.monitor.preemptions}
             for name in ("kv-exhaustion", "kv-exhaustion-swap")}  # las swaps its victims out where it can
    assert PreemptionMode.SWAP in modes["kv-exhaustion-swap"] and PreemptionMode.SWAP not in modes["kv-exhaustion"]
    burst = fcfs("burst-500").requests
    assert len(burst) == 500 and {r.arrival_time_s for r in burst} == {0.0}
    outputs = [r.target_output_tokens for r in fcfs("heavy-tail").requests]
    assert max(outputs) > 20 * float(np.median(outputs))
    speculative = fcfs("speculative").requests
    assert all(len(set(r.token_times_s().tolist())) < r.target_output_tokens for r in speculative)
    pd = fcfs("pd-2+2")
    assert all(instance.num_steps > 0 for instance in pd.simulation.instances)
    rejected = [r for r in fcfs("tiny-kv").requests if r.state is RequestState.REJECTED]
    assert len(rejected) == 2 and all("KV" in (r.finish_reason or "") for r in rejected)


@pytest.mark.parametrize("spec", sorted(CONFIGURED_BOUND_CHECKS))
def test_a_configured_bound_holds_on_the_sustained_stream(spec: str) -> None:
    """(tiered with fair shares once left its only slot idle: a BACKGROUND prompt its share shielded from
    displacement, held back for PREMIUM requests that could not start.)"""
    scenario = next(s for s in SCENARIOS if s.name == "sustained-stream")
    fast = run(spec, scenario, fast_forward=True)
    check_nothing_stranded(fast)
    slow = run(spec, scenario, fast_forward=False)
    check_nothing_stranded(slow)
    assert fast.outcomes() == slow.outcomes()
    CONFIGURED_BOUND_CHECKS[spec](fast)


def test_the_sustained_stream_starves_the_long_request_without_a_guarantee() -> None:
    """The scenario the bounds are checked on is one that starves: under strict priority and under SJF the
    long request waits until the stream is over, far past every bound above."""
    scenario = next(s for s in SCENARIOS if s.name == "sustained-stream")
    for policy in ("priority", "sjf", "fastserve:starve_s=0"):
        result = run(policy, scenario, fast_forward=True)
        long, shorts = _stream_parts(result)
        assert long.first_scheduled_time_s is not None
        assert long.first_scheduled_time_s >= max(r.arrival_time_s for r in shorts)
        with pytest.raises(AssertionError, match="started before an earlier arrival"):
            check_arrival_order(result)  # what 'none' forbids
        assert _wait_s(long) > fastserve_bound_s(FastServeConfig(), shorts)  # past fastserve's default bound


def test_every_policy_states_what_it_guarantees_about_starvation() -> None:
    missing = [name for name in POLICY_NAMES if not starvation_claim(POLICIES.get(name))]
    assert not missing, f"no 'starvation: none | bounded ... | possible ...' in the class docstring: {missing}"
    for name in POLICY_NAMES:
        doc = POLICIES.get(name).__dict__["__doc__"]
        assert len(STARVATION_LINE.findall(doc)) == 1, f"{name}: one starvation line"
    bounded = {name for name in POLICY_NAMES if starvation_claim(POLICIES.get(name)) == "bounded"}
    assert bounded == set(BOUND_CHECKS), "every stated bound needs its check in BOUND_CHECKS (and only those)"


def test_the_docs_say_what_every_policys_docstring_says_about_starvation() -> None:
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "starvation.md").read_text().split())
    for name in POLICY_NAMES:
        line = f"| `{name}` | {starvation_text(POLICIES.get(name)).removeprefix('starvation: ')} |"
        assert line in text, f"docs/starvation.md: {name}'s row should read {line}"
