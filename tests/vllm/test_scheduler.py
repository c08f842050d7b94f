"""The adapter's decisions inside vLLM's real scheduler code, with a fake model runner (no forward pass).

Steps are exact and reproducible, so these tests compare policies step by step on the same workload. The
end-to-end tests with a real model are in test_engine.py and test_serve.py.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client import REGISTRY
from vllm.v1.core.sched.async_scheduler import AsyncScheduler as VllmAsyncScheduler

from semsched.core.plan import Admission, StepResult
from semsched.core.policy import Policy, PolicyConfig, SchedulerView, StepBudget
from semsched.core.request import LengthDistribution, Request
from semsched.core.request import Request as CoreRequest
from semsched.core.scheduler import Scheduler as CoreScheduler
from semsched.core.scheduler import SchedulerConfig as CoreSchedulerConfig
from semsched.policies import POLICIES, make_policy, register_policy
from semsched.policies.ltr import LTR
from semsched.policies.priority_preempt import PriorityPreempt
from semsched.vllm.config import AdapterConfigError
from semsched.vllm.harness import Finished, HarnessConfig, SchedulerHarness
from semsched.vllm.queues import PlanQueue, PolicyQueue
from semsched.vllm.scheduler import UnsupportedVllmError, check_vllm_version
from tests.support import CallCounter

ADAPTER = "semsched.vllm.Scheduler"


class _RejectLong(Policy):
    """Test policy: rejects prompts over 100 tokens."""

    name: ClassVar[str] = "test-reject-long"

    def admit(self, request: Request, view: SchedulerView, now_s: float) -> Admission:
        if request.prompt_tokens > 100:
            return Admission.reject(f"prompt_tokens {request.prompt_tokens} > 100")
        return Admission.accept()


class _SmallSteps(Policy):
    name: ClassVar[str] = "test-small-steps"

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        return StepBudget(max_num_batched_tokens=40, max_num_seqs=3)


@dataclass(frozen=True)
class _OnlyPriorityConfig(PolicyConfig):
    priority: int = 0


class _OnlyPriority(Policy):
    """Test policy: serves only running requests of one priority."""

    name: ClassVar[str] = "test-only-priority"
    config_cls: ClassVar[type[PolicyConfig]] = _OnlyPriorityConfig
    config: _OnlyPriorityConfig

    def running_order(self, running: Sequence[Request], view: SchedulerView, now_s: float) -> Sequence[Request]:
        return [r for r in running if r.priority == self.config.priority]


class _LatestFirst(Policy):
    """Test policy: runs the latest arrival first and counts the ``running_order`` calls it gets."""

    name: ClassVar[str] = "test-latest-first"

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self.calls = 0

    def running_order(self, running: Sequence[Request], view: SchedulerView, now_s: float) -> Sequence[Request]:
        self.calls += 1
        return sorted(running, key=lambda r: -r.arrival_time_s)


class _LatestFirstOnlyOrders(_LatestFirst):
    """The same order, which promises to leave no running request out (``running_order_keeps_all``)."""

    name: ClassVar[str] = "test-latest-first-keeps-all"
    running_order_keeps_all: ClassVar[bool] = True


class _CountsTokens(PriorityPreempt):
    """priority-preempt that hears every token (``on_tokens``) and, in each hook that reads the running requests,
    notes any whose shadow's progress differs from vLLM's request (``engine``: the adapter, set by the test)."""

    name: ClassVar[str] = "test-counts-tokens"

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__(config)
        self.engine: Any = None
        self.tokens: dict[str, int] = {}
        self.checked = 0
        self.stale: list[tuple[str, int, int, int, int]] = []

    def _check(self, running: Sequence[Request]) -> None:
        for shadow in running:
            request = self.engine.requests[shadow.request_id]
            self.checked += 1
            if (shadow.num_computed_tokens, shadow.num_output_tokens) != (request.num_computed_tokens,
                                                                          request.num_output_tokens):
                self.stale.append((shadow.request_id, shadow.num_computed_tokens, request.num_computed_tokens,
                                   shadow.num_output_tokens, request.num_output_tokens))

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        self.tokens[request.request_id] = self.tokens.get(request.request_id, 0) + num_tokens

    def step_budget(self, view: SchedulerView, now_s: float) -> StepBudget | None:
        if self.engine is not None:
            self._check(view.running_requests())
        return None

    def victims_for(self, candidate: Request, running: Sequence[Request], view: SchedulerView,
                    now_s: float) -> Sequence[Request]:
        self._check(running)
        return super().victims_for(candidate, running, view, now_s)


class _OwnKeyLtr(LTR):
    """ltr with a key of its own that drifts otherwise: what ltr says of its keys' times does not describe it."""

    name: ClassVar[str] = "test-own-key-ltr"

    def waiting_key(self, request: Request, now_s: float) -> tuple[float, ...]:
        return (-(now_s - request.arrival_time_s) * request.priority, request.arrival_time_s)


@pytest.fixture(autouse=True, scope="module")
def _test_policies() -> Iterator[None]:
    """Registered only while this module runs, so no other test sees them in ``semsched policies``."""
    classes = (_RejectLong, _SmallSteps, _OnlyPriority, _LatestFirst, _LatestFirstOnlyOrders, _CountsTokens,
               _OwnKeyLtr)
    for cls in classes:
        register_policy(cls)
    yield
    for cls in classes:
        POLICIES.unregister(cls.name)


def _prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(100, 31000) for _ in range(n)]


SCHEDULING = pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
"""vLLM's synchronous scheduling (the CPU backend's) and its asynchronous one (the GPU default), where the
harness schedules each batch before the previous batch's output arrives."""


def _harness(model_dir: Path, policy: str | None, **config: Any) -> SchedulerHarness:
    if policy is None:  # vLLM's own priority scheduling (its async scheduler under async_scheduling)
        return SchedulerHarness(None, model_dir, HarnessConfig(**config), scheduling_policy="priority")
    return SchedulerHarness(ADAPTER, model_dir, HarnessConfig(**config), env={"SEMSCHED_POLICY": policy})


def _late_high_priority(h: SchedulerHarness) -> list[Finished]:
    """Two low-priority requests fill the KV cache (2 x 16 of 32 blocks); when they are 400 tokens in, two
    high-priority requests arrive whose prompts (13 blocks each) do not fit in what is left."""
    rng = random.Random(0)
    for i in range(2):
        h.add(f"low{i}", _prompt(rng, 32), 480, priority=5)
    finished: list[Finished] = []
    while h.output_tokens["low0"] < 400:
        finished += h.step().finished
    for i in range(2):
        h.add(f"high{i}", _prompt(rng, 416), 32, priority=0)
    for record in h.run():
        finished += record.finished
    return finished


@SCHEDULING
def test_priority_preempt_serves_late_high_priority_first_unlike_vllm(
    tiny_model_dir: Path, async_scheduling: bool
) -> None:
    order = {}
    for name, policy in (("vllm", None), ("semsched", "priority-preempt")):
        finished = _late_high_priority(_harness(tiny_model_dir, policy, async_scheduling=async_scheduling))
        assert {f.request_id: f.num_output_tokens for f in finished} == {"low0": 480, "low1": 480, "high0": 32,
                                                                        "high1": 32}
        order[name] = [f.request_id for f in sorted(finished, key=lambda f: f.step)]
    assert order["semsched"][:2] == ["high0", "high1"]
    assert order["vllm"][0].startswith("low")  # vLLM lets a running low-priority request finish first


@SCHEDULING
def test_displacement_is_counted_as_priority_preemption(tiny_model_dir: Path, async_scheduling: bool) -> None:
    def count(reason: str) -> float:
        return _sample("semsched_preemptions_total", reason=reason, mode="recompute")

    before = count("priority")
    h = _harness(tiny_model_dir, "priority-preempt", async_scheduling=async_scheduling)
    preempted: set[str] = set()
    rng = random.Random(0)
    for i in range(2):
        h.add(f"low{i}", _prompt(rng, 32), 480, priority=5)
    while h.output_tokens["low0"] < 400:
        h.step()
    for i in range(2):
        h.add(f"high{i}", _prompt(rng, 416), 32, priority=0)
    for record in h.run():
        preempted |= record.preempted
    assert preempted == {"low0", "low1"}
    assert count("priority") - before == 2


LOCKSTEP_CONFIG = HarnessConfig(num_blocks=25, block_size=32, max_num_seqs=8, max_num_batched_tokens=128)
"""KV-bound: the workload needs more blocks than there are, so displacement frees blocks."""
LOCKSTEP_SLOT_CONFIG = HarnessConfig(num_blocks=400, block_size=32, max_num_seqs=4, max_num_batched_tokens=128)
"""Sequence-slot-bound: blocks for everything, four slots, so displacement frees slots."""
# tiered without aging, fastserve and utility without starvation promotion: the harness's clock is the engine's,
# not the lockstep's step count
LOCKSTEP_POLICIES = ["fcfs", "sjf", "priority-preempt", "priority-preempt:exclusive=true", "srpt",
                     "tiered:aging_per_s=0", "tiered:aging_per_s=0;reserve_fraction=0.3", "hpjf", "semantic",
                     "semantic:stage_aware=strict", "gittins:displace=true;victim=index", "fastserve:starve_s=0",
                     "trail", "utility:starve_s=0", "sarathi-fcfs", "sarathi-priority", "vtc", "slide-batching"]
#: the lockstep policies that displace running work (their workloads must show preemptions)
PREEMPTING = ("priority-preempt", "srpt", "tiered", "semantic", "gittins", "fastserve", "trail")

Workload = list[tuple[int, str, int, int, int]]


def _random_workload(rng: random.Random) -> Workload:
    """24 requests as (arrival step, id, prompt tokens, output tokens, priority): more than the lockstep KV
    cache holds at once."""
    return sorted(
        (rng.randrange(60), f"r{i}", rng.randrange(8, 300), rng.randrange(4, 90), rng.randrange(3))
        for i in range(24)
    )


def _bimodal(output: int) -> LengthDistribution:
    """A prediction whose short mode a request outlives half the time: its expected remaining (and its Gittins
    index) jumps up in the middle of a decode."""
    short, long = max(1, output // 3), output * 2
    return LengthDistribution((short, long), (0.5, 0.5))


def _lockstep(model_dir: Path, policy: str, workload: Workload, rng: random.Random,
              config: HarnessConfig = LOCKSTEP_CONFIG, *,
              predict: Callable[[int], LengthDistribution] | None = None) -> tuple[list[tuple], list[tuple]]:
    """A workload through the adapter inside vLLM's scheduler and through semsched's core scheduler, step by
    step with the same arrivals at the same steps. Returns each side's steps as (scheduled tokens per request,
    preempted request ids). ``predict`` gives each request a predicted length distribution, sent to vLLM in
    ``vllm_xargs`` as a client would."""
    harness = _harness(model_dir, policy, **dataclasses.asdict(config))
    core = CoreScheduler(
        CoreSchedulerConfig(
            max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=config.max_num_seqs,
            block_size=config.block_size, num_gpu_blocks=config.num_blocks - 1,  # vLLM keeps one null block
            num_cpu_blocks=0, watermark=0.0, reserve_full_prompt=True,  # vLLM 0.32's default admission
        ),
        make_policy(policy),
    )
    real: list[tuple] = []
    simulated: list[tuple] = []
    pending = list(workload)
    step = 0
    while pending or harness.has_work():
        while pending and pending[0][0] <= step:
            _, request_id, prompt, output, priority = pending.pop(0)
            arrival = float(step) + len(real) * 1e-6 + int(request_id[1:]) * 1e-9  # a strict, shared order
            prediction = predict(output) if predict is not None else None
            xargs = None if prediction is None else {"predicted_lengths": list(prediction.lengths),
                                                     "predicted_probs": list(prediction.probs)}
            harness.add(request_id, _prompt(rng, prompt), output, priority=priority, arrival_time=arrival,
                        extra_args=xargs)
            core.add_request(
                CoreRequest(request_id, prompt, output, arrival, output_tokens=output, priority=priority,
                            predicted_output=prediction), arrival
            )
        record = harness.step()
        real.append((record.num_scheduled_tokens, record.preempted))
        plan = core.schedule(float(step))
        tokens = {c.request.request_id: c.num_tokens for c in plan.prefill}
        tokens |= {r.request_id: 1 for r in plan.decode}
        simulated.append((tokens, {p.request.request_id for p in plan.preempted}))
        core.update(plan, StepResult(end_time_s=step + 0.5))
        step += 1
        assert step < 5000, "lockstep: the workload did not finish"
    return real, simulated


def _first_difference(real: list[tuple], simulated: list[tuple]) -> int | None:
    different = (i for i, (a, b) in enumerate(zip(real, simulated, strict=False)) if a != b)
    return next(different, None if len(real) == len(simulated) else min(len(real), len(simulated)))


@pytest.mark.parametrize("config", [LOCKSTEP_CONFIG, LOCKSTEP_SLOT_CONFIG], ids=["kv-bound", "slot-bound"])
@pytest.mark.parametrize("policy", LOCKSTEP_POLICIES)
def test_adapter_and_core_scheduler_decide_alike(tiny_model_dir: Path, policy: str, config: HarnessConfig) -> None:
    """The simulator's fidelity starts here: on the same workload the adapter inside vLLM and the core scheduler
    schedule the same tokens and preempt the same requests at every step, whether KV blocks or sequence slots
    run out."""
    preemptions = 0
    for seed in range(3):
        rng = random.Random(seed)
        real, simulated = _lockstep(tiny_model_dir, policy, _random_workload(rng), rng, config)
        preemptions += sum(len(p) for _, p in real)
        first = _first_difference(real, simulated)
        assert first is None, (
            f"seed {seed}, step {first}: vLLM+adapter {real[first:first + 1]} vs core {simulated[first:first + 1]}"
        )
    if policy.startswith(PREEMPTING):
        assert preemptions > 0  # the workloads exercise displacement


PREDICTED_POLICIES = ["srpt:length=predicted", "gittins", "gittins:displace=true;victim=index",
                      "mean:displace=true", "trail", "ssjf", "ltr:starve_s=0", "utility:starve_s=0"]


@pytest.mark.parametrize("policy", PREDICTED_POLICIES)
def test_predicted_distributions_from_vllm_xargs_steer_both_alike(tiny_model_dir: Path, policy: str) -> None:
    """Predicted length distributions sent in vllm_xargs reach the policy inside vLLM as they reach the core:
    the same steps, also when a prediction's remaining work rises mid-decode (bimodal predictions), which a
    policy's fast path must notice on both sides."""
    for seed in range(2):
        rng = random.Random(100 + seed)
        real, simulated = _lockstep(tiny_model_dir, policy, _random_workload(rng), rng, predict=_bimodal)
        first = _first_difference(real, simulated)
        assert first is None, (
            f"seed {seed}, step {first}: vLLM+adapter {real[first:first + 1]} vs core {simulated[first:first + 1]}"
        )


@pytest.mark.parametrize("config", [LOCKSTEP_CONFIG, LOCKSTEP_SLOT_CONFIG], ids=["kv-bound", "slot-bound"])
def test_drops_at_the_preemption_limit_alike_and_tell_the_client(tiny_model_dir: Path,
                                                                  config: HarnessConfig) -> None:
    """tiered:on_limit=drop ends a request rather than preempt it beyond the limit: the adapter drops the same
    requests at the same steps as the core scheduler, and the client gets an abort naming the cause."""
    policy = "tiered:aging_per_s=0;preemption_limit=1;on_limit=drop"
    # a promoted request is protected, so drops are rare: in the KV-bound setup workload 14 has two
    for seed in (0, 1, 14):
        rng = random.Random(seed)
        real, simulated = _lockstep(tiny_model_dir, policy, _random_workload(rng), rng, config)
        first = _first_difference(real, simulated)
        assert first is None, (
            f"seed {seed}, step {first}: vLLM+adapter {real[first:first + 1]} vs core {simulated[first:first + 1]}"
        )
    rng = random.Random(14)
    workload = _random_workload(rng)
    drops_before = _sample("semsched_preemptions_total", reason="kv_pressure", mode="drop")
    finished, _ = _run_workload(_harness(tiny_model_dir, policy, **dataclasses.asdict(config)), workload, rng)
    dropped = [f for f in finished if f.finish_reason == "abort"]
    assert _sample("semsched_preemptions_total", reason="kv_pressure", mode="drop") - drops_before == len(dropped)
    assert all(str(f.stop_reason).startswith("semsched: dropped: KV cache full") for f in dropped)
    assert dropped or config is LOCKSTEP_SLOT_CONFIG  # (blocks for everything: nothing to drop for)
    assert sorted(f.request_id for f in finished) == sorted(r[1] for r in workload)  # nothing lost


def test_the_lockstep_workload_exercises_the_reservation(tiny_model_dir: Path) -> None:
    """The reservation's lockstep case is worth something only if the reserve changes decisions there."""
    steps = []
    for policy in ("tiered:aging_per_s=0", "tiered:aging_per_s=0;reserve_fraction=0.3"):
        rng = random.Random(0)
        steps.append(_lockstep(tiny_model_dir, policy, _random_workload(rng), rng, LOCKSTEP_CONFIG)[1])
    assert steps[0] != steps[1]


def test_urgent_arrivals_displace_as_many_running_requests_as_they_need_in_one_step(tiny_model_dir: Path) -> None:
    """Four low-priority requests hold the four sequence slots; four urgent ones arrive at step 20. Each takes
    the slot of one displaced request, all in that step (the adapter once displaced one per step)."""
    rng = random.Random(7)
    workload = [(0, f"r{i}", 40, 200, 5) for i in range(4)] + [(20, f"r{4 + i}", 40, 10, 0) for i in range(4)]
    real, simulated = _lockstep(tiny_model_dir, "priority-preempt", workload, rng, LOCKSTEP_SLOT_CONFIG)
    assert _first_difference(real, simulated) is None
    assert real[20] == ({"r4": 40, "r5": 40, "r6": 40, "r7": 8}, {"r0", "r1", "r2", "r3"})  # budget 128


@SCHEDULING
def test_waiting_order_follows_the_policy(tiny_model_dir: Path, async_scheduling: bool) -> None:
    """With one sequence slot, requests run one at a time in the policy's order."""
    rng = random.Random(1)
    predicted = {"a": 90, "b": 10, "c": 50}
    orders = {}
    for policy in ("fcfs", "sjf:length=predicted"):
        h = _harness(tiny_model_dir, policy, max_num_seqs=1, async_scheduling=async_scheduling)
        for i, (request_id, length) in enumerate(predicted.items()):
            h.add(request_id, _prompt(rng, 16), 8, arrival_time=1000.0 + i,
                  extra_args={"predicted_output_tokens": length})
        orders[policy] = [f.request_id for r in h.run() for f in r.finished]
    assert orders["fcfs"] == ["a", "b", "c"]
    assert orders["sjf:length=predicted"] == sorted(predicted, key=predicted.__getitem__)


def test_semantic_orders_by_the_urgency_in_vllm_xargs(tiny_model_dir: Path) -> None:
    """Urgency arrives in ``vllm_xargs``: with one sequence slot the most urgent level runs first, and within a
    level the shortest predicted output (seed 000's (f_e, f_t))."""
    rng = random.Random(3)
    h = _harness(tiny_model_dir, "semantic", max_num_seqs=1)
    requests = {"calm": (4, 8), "urgent-long": (0, 90), "urgent-short": (0, 10), "mid": (2, 10)}
    for i, (request_id, (urgency, predicted)) in enumerate(requests.items()):
        h.add(request_id, _prompt(rng, 16), 8, arrival_time=1000.0 + i,
              extra_args={"urgency": urgency, "predicted_output_tokens": predicted})
    order = [f.request_id for r in h.run() for f in r.finished]
    assert order == ["urgent-short", "urgent-long", "mid", "calm"]


@SCHEDULING
def test_semantic_certificates_change_no_vllm_step(
    tiny_model_dir: Path, tmp_path: Path, async_scheduling: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside vLLM, what semantic's steps priced by a certificate (a batch of decodes that stays put) find is
    what a scan of every running request finds, and they schedule what steps that scan schedule: the same tokens
    for the same requests at every step, the same preemptions, the same finishes; the certificates are used. On a
    profile where the context prices a decode as much as its length, so that decodes overtake one another within
    tens of tokens."""
    from semsched.policies import semantic as semantic_module
    from semsched.policies.semantic import Semantic

    profile = tmp_path / "context-heavy.yaml"
    profile.write_text("kind: analytic\nname: context-heavy\ncoefficients:\n  alpha1: 0.0\n  alpha2: 1.0e-4\n"
                       "  gamma1: 3.7e-4\n  gamma2: 0.0119\n  beta: 1.0e-5\n")

    used = 0
    certified_scan = Semantic._certified_scan

    def counting(self: Semantic, running: Any, certificate: Any) -> Any:
        nonlocal used
        best = certified_scan(self, running, certificate)
        if best is not None:  # what a scan of every request finds (it keeps the same keys and notes)
            used += 1
            scanned = self._scan_running(running, fresh=True)
            assert self._scanned.in_order and scanned == (best, True, 0)
        return best

    monkeypatch.setattr(Semantic, "_certified_scan", counting)
    # a certificate at every scan that may build one, however short its use (what they cost is not checked here)
    monkeypatch.setattr(semantic_module, "_CERTIFICATE_PAYS", 0)
    schedules = []
    for certify in (True, False):
        with monkeypatch.context() as patch:
            if not certify:
                patch.setattr(Semantic, "_certify", lambda self, running: None)
            rng = random.Random(11)
            h = _harness(tiny_model_dir, f"semantic:profile={profile}", max_num_seqs=20, num_blocks=150,
                         async_scheduling=async_scheduling)
            for i in range(48):  # short and long contexts, close lengths, two levels; a few urgent ones
                h.add(f"r{i}", _prompt(rng, rng.choice([8, 16, 200, 300])), rng.randrange(100, 200),
                      arrival_time=1000.0 + i, extra_args={"urgency": 0 if i % 7 == 6 else rng.randrange(1, 3)})
            records = h.run()
        schedules.append([(r.num_scheduled_tokens, sorted(r.preempted), sorted(f.request_id for f in r.finished))
                          for r in records])
    assert schedules[0] == schedules[1]
    assert used > 20


class _SteppingClock:
    """``time`` for the adapter's module with a ``time()`` that moves 50 ms at each call, so that a run of a few
    hundred steps spans several re-key intervals, the same in every run."""

    monotonic = staticmethod(time.monotonic)
    perf_counter = staticmethod(time.perf_counter)

    def __init__(self) -> None:
        self.now = 5000.0

    def time(self) -> float:
        self.now += 0.05
        return self.now


@SCHEDULING
@pytest.mark.parametrize("policy", ["tiered:aging_per_s=1.0", "ltr:starve_s=2", "fastserve:starve_s=2",
                                    "utility:starve_s=4;risk_slack=0.6"])
def test_a_rekey_of_only_what_may_have_changed_schedules_what_a_full_rekey_does(
    tiny_model_dir: Path, async_scheduling: bool, policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside vLLM, the queue that re-keys only what may have changed (tiered: one request per aging class;
    ltr, fastserve, utility: the requests whose key's time has come) schedules, step by step, what re-keying every
    waiting request schedules, on four random workloads; and the re-keys matter there (without them the schedule
    differs in at least one)."""
    from semsched.vllm import scheduler as adapter

    def full_walk(self: Any) -> PolicyQueue:
        return PolicyQueue(self._waiting_key, self._clock)

    mattered = 0
    for seed in range(4):
        schedules, queues = [], []
        for mode in ("full", "incremental", "never"):
            with monkeypatch.context() as patch:
                clock = _SteppingClock()
                patch.setattr(adapter, "time", clock)
                if mode == "full":
                    patch.setattr(adapter.Scheduler, "_keyed_queue", full_walk)
                if mode == "never":
                    patch.setattr(adapter.Scheduler, "_maybe_rekey", lambda self, now: None)
                h = _harness(tiny_model_dir, policy, max_num_seqs=4, num_blocks=40,
                             async_scheduling=async_scheduling)
                queues.append(type(h.scheduler.waiting).__name__)
                rng = random.Random(seed)
                records, added = [], 0
                while added < 40 or h.has_work():
                    if added < 40 and rng.random() < 0.5:  # arrivals over ~80 steps; some with a TTFT SLO
                        slo = {"ttft_slo_ms": 3000} if added % 4 == 0 else None
                        h.add(f"r{added}", _prompt(rng, rng.choice([16, 40, 120])), rng.randrange(4, 60),
                              priority=rng.randrange(3), arrival_time=clock.now, extra_args=slo)
                        added += 1
                    records.append(h.step())
            schedules.append([(r.num_scheduled_tokens, sorted(r.preempted),
                               sorted(f.request_id for f in r.finished)) for r in records])
        assert queues[1] == ("ClassedPolicyQueue" if policy.startswith("tiered") else "PolicyQueue")
        assert schedules[0] == schedules[1], seed
        mattered += schedules[2] != schedules[1]
    assert mattered


@SCHEDULING
def test_invalid_xargs_abort_only_that_request(tiny_model_dir: Path, async_scheduling: bool) -> None:
    h = _harness(tiny_model_dir, "priority-preempt", async_scheduling=async_scheduling)
    rng = random.Random(2)
    h.add("good", _prompt(rng, 20), 6)
    h.add("bad", _prompt(rng, 20), 6, extra_args={"ttft_slo_ms": -1})
    finished = {f.request_id: f for r in h.run() for f in r.finished}
    assert finished["good"].num_output_tokens == 6 and finished["good"].finish_reason == "length"
    assert finished["bad"].finish_reason == "abort" and finished["bad"].num_output_tokens == 0
    assert "vllm_xargs.ttft_slo_ms" in str(finished["bad"].stop_reason)


@SCHEDULING
def test_policy_rejection_reaches_the_client(tiny_model_dir: Path, async_scheduling: bool) -> None:
    h = _harness(tiny_model_dir, "test-reject-long", async_scheduling=async_scheduling)
    rng = random.Random(3)
    h.add("short", _prompt(rng, 50), 4)
    h.add("long", _prompt(rng, 150), 4)
    finished = {f.request_id: f for r in h.run() for f in r.finished}
    assert finished["short"].num_output_tokens == 4
    assert finished["long"].finish_reason == "abort"
    assert "rejected by test-reject-long: prompt_tokens 150 > 100" in str(finished["long"].stop_reason)


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_metrics_count_rejections_by_kind_and_tokens_per_tier(tiny_model_dir: Path) -> None:
    """A full BACKGROUND queue (tiered:max_waiting) rejects with reason 'queue full:', counted under the label
    queue_full, not the catch-all 'policy'; served tokens are counted per priority and tier as requests end."""
    queue_full = ("semsched_rejections_total", {"reason": "queue_full"})
    tokens = ("semsched_output_tokens_total", {"priority": "3", "tier": "BACKGROUND"})
    before = {name: _sample(name, **labels) for name, labels in (queue_full, tokens)}
    h = _harness(tiny_model_dir, "tiered:max_waiting=0/0/0/1", max_num_seqs=1)
    rng = random.Random(4)
    for i in range(3):  # all three wait when they arrive: the first fills BACKGROUND's queue of one
        h.add(f"bg{i}", _prompt(rng, 20), 5, priority=3, extra_args={"tier": "BACKGROUND"})
    finished = {f.request_id: f for r in h.run() for f in r.finished}
    assert finished["bg0"].num_output_tokens == 5
    rejected = [f for f in finished.values() if f.finish_reason == "abort"]
    assert len(rejected) == 2 and all("queue full:" in str(f.stop_reason) for f in rejected)
    assert _sample(queue_full[0], **queue_full[1]) - before[queue_full[0]] == 2
    assert _sample(tokens[0], **tokens[1]) - before[tokens[0]] == 5


def test_shedding_rejects_background_while_premium_misses_its_ttft(tiny_model_dir: Path) -> None:
    """tiered's SLO guard inside vLLM: 25 PREMIUM requests stamped as having arrived 10 s ago all miss their
    200 ms TTFT; the next BACKGROUND arrival is shed: an abort whose reason names it, counted as 'shed'. A
    PREMIUM arrival is never shed."""
    shed = ("semsched_rejections_total", {"reason": "shed"})
    before = _sample(shed[0], **shed[1])
    h = _harness(tiny_model_dir, "tiered:shedding=true", max_num_seqs=8)
    rng = random.Random(5)
    late = time.time() - 10.0
    for i in range(25):
        h.add(f"premium{i}", _prompt(rng, 16), 2, priority=1, extra_args={"tier": "PREMIUM"}, arrival_time=late)
    finished = {f.request_id: f for r in h.run() for f in r.finished}
    assert all(f.finish_reason == "length" for f in finished.values()) and len(finished) == 25
    time.sleep(1.1)  # the guard re-judges at arrivals at most once a second (its evaluate_every_s)
    h.add("background", _prompt(rng, 16), 2, priority=3, extra_args={"tier": "BACKGROUND"})
    h.add("premium-after", _prompt(rng, 16), 2, priority=1, extra_args={"tier": "PREMIUM"})
    finished = {f.request_id: f for r in h.run() for f in r.finished}
    assert finished["background"].finish_reason == "abort"
    assert str(finished["background"].stop_reason).startswith("semsched: rejected by tiered: shed: ")
    assert finished["premium-after"].finish_reason == "length"
    assert _sample(shed[0], **shed[1]) - before == 1


def test_the_policys_tier_table_names_tiers_and_gives_their_slos(tiny_model_dir: Path, tmp_path: Path) -> None:
    """tiered:tier_table=PATH inside vLLM: a request naming a tier of that table is labelled with it and judged
    against its SLOs (here an E2E target no request can meet: a missed E2E is counted under GOLD)."""
    table = tmp_path / "tiers.yaml"
    table.write_text("tiers:\n  - {name: GOLD, priority: 0, e2e_slo_ms: 0.001}\n  - {name: BULK, priority: 1}\n")
    missed = ("semsched_slo_requests_total", {"priority": "0", "tier": "GOLD", "slo": "e2e", "outcome": "missed"})
    finished = ("semsched_requests_finished_total", {"priority": "0", "tier": "GOLD"})
    before = {name: _sample(name, **labels) for name, labels in (missed, finished)}
    h = _harness(tiny_model_dir, f"tiered:tier_table={table}")
    rng = random.Random(6)
    h.add("gold", _prompt(rng, 16), 3, priority=0, extra_args={"tier": "gold"})
    assert [f.finish_reason for r in h.run() for f in r.finished] == ["length"]
    assert _sample(finished[0], **finished[1]) - before[finished[0]] == 1
    assert _sample(missed[0], **missed[1]) - before[missed[0]] == 1


@SCHEDULING
def test_step_budget_caps_tokens_and_sequences(tiny_model_dir: Path, async_scheduling: bool) -> None:
    h = _harness(tiny_model_dir, "test-small-steps", async_scheduling=async_scheduling)
    rng = random.Random(4)
    for i in range(6):
        h.add(f"r{i}", _prompt(rng, 100), 5)
    records = h.run()
    assert max(sum(r.num_scheduled_tokens.values()) for r in records) == 40
    assert max(len(r.num_scheduled_tokens) for r in records) <= 3
    assert all(h.output_tokens[f"r{i}"] == 5 for i in range(6))


def test_running_order_holds_back_what_it_leaves_out(tiny_model_dir: Path) -> None:
    h = _harness(tiny_model_dir, "test-only-priority:priority=0")
    rng = random.Random(5)
    h.add("p1", _prompt(rng, 10), 5, priority=1)
    h.step()  # p1 is admitted and prefilled, then held back while a priority-0 request runs
    h.add("p0", _prompt(rng, 10), 5, priority=0)
    scheduled = [set(h.step().num_scheduled_tokens) for _ in range(5)]
    assert all("p1" not in s for s in scheduled)
    assert h.output_tokens["p0"] == 5 and h.output_tokens["p1"] == 1


def test_an_order_that_keeps_all_is_not_asked_in_steady_decode_steps(tiny_model_dir: Path) -> None:
    """``running_order_keeps_all``: while every running request decodes one token a step within the budget and
    the KV blocks, the order cannot change the batch, and the adapter skips the hook; a policy without the promise
    is asked every step. Both serve every request in full, the same batches step by step."""
    calls, batches = {}, {}
    for policy in ("test-latest-first", "test-latest-first-keeps-all"):
        h = _harness(tiny_model_dir, policy, num_blocks=64)
        rng = random.Random(6)
        for i in range(4):
            h.add(f"r{i}", _prompt(rng, 20), 40, arrival_time=1.0 + i)
        steps = [h.step() for _ in range(3)]  # the prompts, then steady decodes
        before = h.scheduler.semsched_policy.calls
        steps += [h.step() for _ in range(20)]
        calls[policy] = h.scheduler.semsched_policy.calls - before
        steps += h.run()
        batches[policy] = [r.num_scheduled_tokens for r in steps]
        assert all(h.output_tokens[f"r{i}"] == 40 for i in range(4))
    assert calls == {"test-latest-first": 20, "test-latest-first-keeps-all": 0}
    assert batches["test-latest-first"] == batches["test-latest-first-keeps-all"]


@SCHEDULING
def test_running_shadows_hold_vllms_progress_after_token_reports(tiny_model_dir: Path,
                                                                  async_scheduling: bool) -> None:
    """A step after a token report that refreshed every running request's shadow skips the refresh: on
    workloads with admissions, displacements, KV-pressure preemptions and steady decode stretches, every hook sees
    vLLM's progress, and ``on_tokens`` hears of every token once."""
    config = dataclasses.asdict(LOCKSTEP_CONFIG) | {"async_scheduling": async_scheduling}
    for seed in range(3):
        rng = random.Random(seed)
        workload = _random_workload(rng)
        h = _harness(tiny_model_dir, "test-counts-tokens", **config)
        policy = h.scheduler.semsched_policy
        policy.engine = h.scheduler
        finished, preemptions = _run_workload(h, workload, rng)
        assert preemptions > 0 and policy.checked > 0
        assert policy.stale == []
        assert policy.tokens == {f.request_id: f.num_output_tokens for f in finished}


def test_bad_policy_stops_the_engine_with_a_clear_error(tiny_model_dir: Path) -> None:
    with pytest.raises(AdapterConfigError, match="SEMSCHED_POLICY: policy 'teleport': unknown policy"):
        _harness(tiny_model_dir, "teleport")


def test_unsupported_vllm_versions_are_refused() -> None:
    check_vllm_version("0.32.0")
    check_vllm_version("0.32.5.dev3+cpu")
    with pytest.raises(UnsupportedVllmError, match="supports vLLM 0.32.x; found vLLM 0.31.2"):
        check_vllm_version("0.31.2")


@dataclass
class _FakeRequest:
    request_id: str
    priority: int
    arrival_time: float


def test_policy_queue_orders_by_key_and_removes_lazily() -> None:
    queue = PolicyQueue(lambda r, now: (r.priority, r.arrival_time), clock=lambda: 0.0)
    requests = [_FakeRequest(f"r{i}", priority=i % 3, arrival_time=float(10 - i)) for i in range(9)]
    for request in requests:
        queue.add_request(request)  # type: ignore[arg-type]
    queue.remove_request(requests[0])  # type: ignore[arg-type]
    queue.remove_requests([requests[3], requests[4]])  # type: ignore[list-item]
    expected = sorted((r for r in requests if r.request_id not in {"r0", "r3", "r4"}),
                      key=lambda r: (r.priority, r.arrival_time))
    assert len(queue) == 6 and list(queue) == expected
    assert queue.priority_counts == {0: 1, 1: 2, 2: 3}
    assert queue.peek_request() is expected[0]
    assert [queue.pop_request() for _ in range(6)] == expected
    assert not queue and sum(queue.priority_counts.values()) == 0
    with pytest.raises(IndexError):
        queue.pop_request()


def test_a_plan_queue_reads_the_policy_order_lazily_and_strands_nothing() -> None:
    """A :class:`PlanQueue` follows its order (skipping what it does not hold), then offers what the order missed,
    in the order they were added; requests brought forward come first until put back; the gate stops it at its
    head."""
    requests = {name: _FakeRequest(name, priority=i % 2, arrival_time=float(i))
                for i, name in enumerate("abcdefxz")}
    order_calls = 0

    def order() -> Iterator[_FakeRequest]:
        nonlocal order_calls
        order_calls += 1
        yield from (requests[name] for name in "dxbza")  # (x, z: not queued here; c, e, f: missed by the order)

    queue = PlanQueue(order)  # type: ignore[arg-type]
    for name in "abcdef":  # (x and z are elsewhere: another queue's)
        queue.add_request(requests[name])  # type: ignore[arg-type]
    queue.remove_request(requests["f"])  # type: ignore[arg-type]
    assert len(queue) == 5 and queue.priority_counts == {0: 3, 1: 2} and order_calls == 0
    assert [r.request_id for r in queue] == ["d", "b", "a", "c", "e"]
    queue.bring_forward(requests["e"])  # type: ignore[arg-type]
    assert queue.peek_request().request_id == "e"
    queue.rekey_request(requests["e"])  # type: ignore[arg-type]
    queue.gate = lambda request: request.request_id != "d"
    assert not queue  # (its head, d, fails the gate)
    queue.gate = None
    assert [queue.pop_request().request_id for _ in range(5)] == ["d", "b", "a", "c", "e"]
    assert not queue and sum(queue.priority_counts.values()) == 0
    with pytest.raises(IndexError):
        queue.peek_request()

def test_a_plan_queue_serves_only_a_policy_whose_order_is_fixed_when_made(tiny_model_dir: Path) -> None:
    """vtc and slide-batching plan an order that admissions do not move: vLLM reads it lazily. utility's order is
    a walk that asks its head again after each admission (which the adapter reports only after the step): even
    re-keyed at every step, it keeps the keyed queue."""
    for policy, queue_class in (("vtc", PlanQueue), ("slide-batching", PlanQueue), ("fcfs", PolicyQueue),
                                ("utility:check_s=0.001", PolicyQueue)):
        h = _harness(tiny_model_dir, policy, num_blocks=64, max_num_seqs=4)
        assert type(h.scheduler.waiting) is queue_class, policy
        assert type(h.scheduler.kv_holding_waiting) is queue_class, policy

def test_a_rekey_keys_only_what_may_have_changed_where_the_policy_says_so(tiny_model_dir: Path) -> None:
    """The keyed queue's re-key follows what the policy says of its keys: ltr's times, tiered's aging classes;
    a subclass with a key of its own (and tiered with fair shares, whose short class is known only at a re-key)
    is re-keyed in full."""
    expected = {"ltr:starve_s=2": ("PolicyQueue", True), "tiered": ("ClassedPolicyQueue", False),
                "test-own-key-ltr:starve_s=2": ("PolicyQueue", False),
                "tiered:fair_shares=0.5/0.3/0.2": ("PolicyQueue", False)}
    for policy, (queue_class, timed) in expected.items():
        h = _harness(tiny_model_dir, policy, num_blocks=64, max_num_seqs=4)
        for queue in (h.scheduler.waiting, h.scheduler.kv_holding_waiting):
            assert type(queue).__name__ == queue_class, policy
            assert (queue._until is not None) == timed, policy


def test_a_burst_of_arrivals_costs_slide_batching_one_plan_not_one_each(tiny_model_dir: Path) -> None:
    """vLLM keys each request added to its queue; slide-batching's key is a rank in a plan over every request, made
    once per instant. Added between two steps (each at its own time), the burst is ordered at the next step, from
    one plan: before, every arrival made a plan over the whole queue (O(N^2) for a burst of N)."""
    h = _harness(tiny_model_dir, "slide-batching", num_blocks=64, max_num_seqs=4)
    rng = random.Random(0)
    h.add("first", _prompt(rng, 16), 8)
    h.step()
    policy = h.scheduler.semsched_policy
    plans = [CallCounter(policy, "_full_plan"), CallCounter(policy, "_make_plan")]  # (every plan is made by one)
    for i in range(60):
        h.add(f"burst{i}", _prompt(rng, 16), 8, priority=i % 3)
    assert sum(count.calls for count in plans) == 0
    record = h.step()
    assert 1 <= sum(count.calls for count in plans) <= 3
    assert record.num_scheduled_tokens  # (the step ran on that plan)


def _run_workload(h: SchedulerHarness, workload: Workload, rng: random.Random) -> tuple[list[Finished], int]:
    """Add each request at its arrival step and run to the end. Returns what finished, in order, and the
    number of preemptions."""
    pending = list(workload)
    finished: list[Finished] = []
    preemptions = 0
    step = 0
    while pending or h.has_work():
        while pending and pending[0][0] <= step:
            _, request_id, prompt, output, priority = pending.pop(0)
            h.add(request_id, _prompt(rng, prompt), output, priority=priority, arrival_time=1000.0 + step)
        record = h.step()
        finished += record.finished
        preemptions += len(record.preempted)
        step += 1
        assert step < 5000, "the workload did not finish"
    return finished, preemptions


def test_async_scheduling_gets_the_async_adapter_one_batch_ahead(tiny_model_dir: Path) -> None:
    from semsched.vllm.scheduler import AsyncScheduler, Scheduler

    assert type(_harness(tiny_model_dir, "fcfs").scheduler) is Scheduler
    h = _harness(tiny_model_dir, "fcfs", async_scheduling=True)
    assert type(h.scheduler) is AsyncScheduler and isinstance(h.scheduler, VllmAsyncScheduler)
    h.add("r", _prompt(random.Random(6), 20), 3)
    assert h.step().num_scheduled_tokens == {"r": 20}
    assert h.output_tokens["r"] == 0 and h.scheduler.requests["r"].num_output_placeholders == 1
    # scheduled again before its first token arrived; that token arrives during this step
    assert h.step().num_scheduled_tokens == {"r": 1} and h.output_tokens["r"] == 1
    assert [f.num_output_tokens for r in h.run() for f in r.finished] == [3]


@pytest.mark.parametrize("policy", [*LOCKSTEP_POLICIES, "tiered"])  # tiered: aging on the engine's clock
def test_async_adapter_finishes_every_request_exactly(tiny_model_dir: Path, policy: str) -> None:
    """Under asynchronous scheduling a batch is scheduled before the previous batch's tokens arrive, and a
    request preempted in between has stale tokens in flight. On the lockstep workloads (more than the KV cache
    holds) every request still finishes once, with exactly its tokens, and the preempting policies preempt."""
    config = dataclasses.asdict(LOCKSTEP_CONFIG) | {"async_scheduling": True}
    for seed in range(3):
        rng = random.Random(seed)
        workload = _random_workload(rng)
        finished, preemptions = _run_workload(_harness(tiny_model_dir, policy, **config), workload, rng)
        assert sorted(f.request_id for f in finished) == sorted(request_id for _, request_id, *_ in workload)
        assert {f.request_id: f.num_output_tokens for f in finished} == {r[1]: r[3] for r in workload}
        assert {f.finish_reason for f in finished} == {"length"}
        if policy.startswith(PREEMPTING):
            assert preemptions > 0
