"""The hooks later policies rely on: time-dependent re-keying, partial swap, running order."""

import functools
import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pytest

from semsched.core.plan import PreemptionMode, StepResult
from semsched.core.policy import Policy, SchedulerView, SortKey, describes_waiting_keys
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import (
    Scheduler,
    SchedulerConfig,
    _ClassedWaitingQueue,
    _TimedWaitingQueue,
    _WaitingQueue,
)
from semsched.latency import load_profile
from semsched.policies import make_policy
from semsched.policies.priority_preempt import PriorityPreempt
from semsched.sim.engine import Instance, Simulation
from semsched.sim.router import make_router
from tests.support import check_kv, make_request, make_scheduler, random_requests, run_checked


class Aging(Policy):
    """Priority improves by one level per second waited (seed 003's aging, simplified)."""

    name: ClassVar[str] = "test-aging"
    rekey_interval_s: ClassVar[float | None] = 1.0

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (request.priority - (now_s - request.arrival_time_s), request.arrival_time_s)


class AgingWithoutRekey(Aging):
    name: ClassVar[str] = "test-aging-frozen"
    rekey_interval_s: ClassVar[float | None] = None


class AgingByClass(Aging):
    """The same order, keyed one request per class (priority) at each re-key."""

    name: ClassVar[str] = "test-aging-classes"

    def aging_class(self, request: Request) -> int:
        return request.priority


def _key_at(policy: Policy, now_s: float, request: Request) -> SortKey:
    return policy.waiting_key(request, now_s)


def _queue_ops(seed: int, policy: Policy, queues: Sequence[_WaitingQueue], **fields: object) -> list[str]:
    """Random pushes, removals, pops, peeks, re-keys and compactions applied to each of ``queues`` alike, with
    ``policy``'s keys at a clock that moves forward; arrivals on a coarse grid, so that keys tie. Returns what
    the first queue popped and peeked, after checking every queue answered the same."""
    rng = np.random.default_rng(seed)
    now, serial, live, seen = 0.0, 0, [], []
    for _ in range(1500):
        op = rng.random()
        if op < 0.45 or not live:
            request = make_request(f"r{serial}", arrival=max(0.0, now - float(rng.integers(0, 40)) / 4),
                                   priority=int(rng.integers(0, 4)), num_preemptions=int(rng.integers(0, 3)),
                                   **fields)
            serial += 1
            key = policy.waiting_key(request, now)
            for queue in queues:
                queue.push(key, request)
            live.append(request.request_id)
        elif op < 0.75:
            request_id = live.pop(int(rng.integers(0, len(live))))
            assert all(queue.remove(request_id) for queue in queues)
        elif op < 0.85:
            popped = {queue.pop().request_id for queue in queues}
            assert len(popped) == 1
            request_id = popped.pop()
            live.remove(request_id)
            seen.append(f"pop {request_id}")
        elif op < 0.95:
            now += float(rng.exponential(1.0))
            key_at = functools.partial(_key_at, policy, now)  # (the classed queue keeps it for later heads)
            for queue in queues:
                queue.rekey(key_at, now)
        elif op < 0.97:
            for queue in queues:
                queue._compact()
        else:
            peeked = {None if (r := queue.peek()) is None else r.request_id for queue in queues}
            assert len(peeked) == 1
            seen.append(f"peek {peeked.pop()}")
        assert {len(queue) for queue in queues} == {len(live)}
        assert all(sorted(r.request_id for r in queue) == sorted(live) for queue in queues)
    return seen


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("spec", ["gittins:slo_slack=0.5;protect_priority=2",
                                  "mean:slo_slack=0.2;protect_priority=1"])
def test_a_queue_that_keys_only_what_is_due_pops_what_a_full_rekey_would(seed: int, spec: str) -> None:
    """A cost-index policy with ``slo_slack`` says when a waiting key changes (its TTFT deadline at risk, then
    passed): keyed at each re-key only where that time has come (and where enqueued since), the queue pops and
    peeks what the full re-key gives, whatever was pushed, removed or compacted."""
    policy = make_policy(spec)
    assert describes_waiting_keys(policy, "waiting_key_until") and not policy.uses_hook("waiting_order")
    asked: list[float] = []

    def until(request: Request, now_s: float) -> float:
        asked.append(now_s)
        return policy.waiting_key_until(request, now_s)

    seen = _queue_ops(seed, policy, [_WaitingQueue(), _TimedWaitingQueue(until)], ttft_slo_s=3.0)
    assert len(seen) > 100 and asked


@pytest.mark.parametrize("seed", range(6))
def test_aging_classes_pop_what_a_full_rekey_would(seed: int) -> None:
    # tiered's aging (0.1 a second to a cap of 1.5, promotion after the preemption limit) keyed the full way and
    # one request per class at each re-key: the same pops and peeks, whatever was pushed, removed or compacted
    tiered = make_policy("tiered:preemption_limit=2")
    assert tiered.uses_hook("aging_class")
    seen = _queue_ops(seed, tiered, [_WaitingQueue(), _ClassedWaitingQueue(tiered.aging_class)])
    assert len(seen) > 100


def test_aging_classes_are_asked_only_where_the_policy_has_them() -> None:
    assert not make_policy("tiered:fair_shares=0.5/0.3/0.2").uses_hook("aging_class")  # (known at a re-key)
    assert isinstance(Scheduler(SchedulerConfig(), AgingByClass())._waiting, _ClassedWaitingQueue)
    assert not isinstance(Scheduler(SchedulerConfig(), Aging())._waiting, _ClassedWaitingQueue)
    assert not isinstance(Scheduler(SchedulerConfig(), Policy())._waiting, _ClassedWaitingQueue)


class FasterAgingByClass(AgingByClass):
    """A subclass that changes the key and not the classes: its parent's classes do not describe it."""

    name: ClassVar[str] = "test-aging-classes-faster"

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        waited = now_s - request.arrival_time_s
        return (request.priority - 2.0 * waited * request.priority, request.arrival_time_s)


class FasterAgingByItsClass(FasterAgingByClass):
    name: ClassVar[str] = "test-aging-classes-faster-own"

    def aging_class(self, request: Request) -> int:
        return request.priority


def test_a_subclass_that_redefines_the_key_alone_is_rekeyed_in_full() -> None:
    """``aging_class`` (and ``waiting_key_until``) describe the ``waiting_key`` they were written with: a subclass
    that redefines the key alone gets the full re-key, in the core and inside vLLM; one that redefines both keeps
    its classes."""
    assert describes_waiting_keys(AgingByClass(), "aging_class")
    assert not describes_waiting_keys(FasterAgingByClass(), "aging_class")
    assert describes_waiting_keys(FasterAgingByItsClass(), "aging_class")
    assert not isinstance(Scheduler(SchedulerConfig(), FasterAgingByClass())._waiting, _ClassedWaitingQueue)
    assert isinstance(Scheduler(SchedulerConfig(), FasterAgingByItsClass())._waiting, _ClassedWaitingQueue)
    ltr = make_policy("ltr:starve_s=5")

    class OwnLtr(type(ltr)):  # type: ignore[misc]
        def waiting_key(self, request: Request, now_s: float) -> SortKey:
            return (now_s - request.arrival_time_s,)

    assert describes_waiting_keys(ltr, "waiting_key_until")
    assert not describes_waiting_keys(OwnLtr(ltr.config), "waiting_key_until")
    assert not describes_waiting_keys(Aging(), "waiting_key_until")  # (not defined: never asked)


def test_keys_due_schedule_as_the_full_rekey_does() -> None:
    """The scheduler keys a cost-index policy with ``slo_slack`` by what is due, and schedules what the full re-key
    schedules; the re-keys matter in this run (without them it differs)."""
    runs = []
    for mode in ("full", "due", "never"):
        scheduler = Scheduler(SchedulerConfig(num_gpu_blocks=64, max_num_seqs=4),
                              make_policy("gittins:slo_slack=0.5;protect_priority=2"))
        assert isinstance(scheduler._waiting, _TimedWaitingQueue)
        if mode == "full":
            scheduler._waiting = _WaitingQueue()
        if mode == "never":
            scheduler._next_rekey_s = math.inf
        requests = random_requests(3, 300, rate=40.0, num_priorities=4, with_slos=True)
        run_checked(scheduler, requests)
        runs.append([(r.request_id, r.first_scheduled_time_s, r.finish_time_s) for r in requests])
    assert runs[0] == runs[1]
    assert runs[2] != runs[1]


def test_aging_classes_schedule_as_the_full_rekey_does() -> None:
    runs = []
    for policy in (Aging(), AgingByClass()):
        scheduler = Scheduler(SchedulerConfig(num_gpu_blocks=64, max_num_seqs=4), policy)
        requests = random_requests(3, 300, rate=40.0, num_priorities=4)
        run_checked(scheduler, requests)
        runs.append([(r.request_id, r.first_scheduled_time_s, r.finish_time_s) for r in requests])
    assert runs[0] == runs[1]


def _first_admitted_after_wait(policy: Policy) -> str:
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=1), policy)
    scheduler.add_request(make_request("blocker", prompt=4, output=2), 0.0)
    scheduler.update(scheduler.schedule(0.0), StepResult(0.1))
    scheduler.add_request(make_request("old", prompt=4, output=1, priority=5, arrival=0.1), 0.1)
    scheduler.add_request(make_request("fresh", prompt=4, output=1, priority=1, arrival=9.0), 9.0)
    scheduler.update(scheduler.schedule(9.0), StepResult(9.1))  # blocker finishes
    plan = scheduler.schedule(9.1)
    return plan.prefill[0].request.request_id


def test_rekey_lets_an_old_request_overtake() -> None:
    # enqueued keys: old 5 - 0 = 5, fresh 1 - 0 = 1; re-keyed at 9.1: old 5 - 9 = -4
    assert _first_admitted_after_wait(AgingWithoutRekey()) == "fresh"
    assert _first_admitted_after_wait(Aging()) == "old"


class HalfSwap(PriorityPreempt):
    name: ClassVar[str] = "test-half-swap"

    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        return PreemptionMode.SWAP

    def swap_tokens(self, request: Request, view: SchedulerView) -> int:
        return request.num_computed_tokens // 2


def test_partial_swap_saves_part_and_recomputes_the_rest() -> None:
    config = SchedulerConfig(block_size=4, num_gpu_blocks=20, num_cpu_blocks=20, watermark=0.0)
    scheduler = Scheduler(config, HalfSwap())
    low = make_request("low", prompt=60, output=10, priority=3)
    scheduler.add_request(low, 0.0)
    scheduler.update(scheduler.schedule(0.0), StepResult(1.0))  # low computed 60
    scheduler.add_request(make_request("urgent", prompt=20, output=1, priority=0, arrival=1.0), 1.0)
    plan = scheduler.schedule(1.0)
    assert low.state is RequestState.PREEMPTED_SWAPPED
    assert low.num_computed_tokens == 30 and plan.swap_out_tokens == 30
    assert len(scheduler.kv.cpu_block_table(low)) == 30 // 4 + 1
    scheduler.update(plan, StepResult(2.0))  # urgent finishes
    plan = scheduler.schedule(2.0)
    assert plan.swapped_in == [low] and plan.swap_in_tokens == 30
    assert [(c.num_tokens, c.context_tokens) for c in plan.prefill] == [(61 - 30, 30)]


def test_partial_swap_keeps_invariants_on_random_workloads() -> None:
    for seed in range(5):
        config = SchedulerConfig(block_size=4, num_gpu_blocks=120, num_cpu_blocks=60, max_num_batched_tokens=128)
        scheduler = Scheduler(config, HalfSwap())
        requests = random_requests(seed, 40, rate=30.0, max_prompt=120, max_output=40, num_priorities=4)
        run_checked(scheduler, requests)
        assert all(r.state is RequestState.FINISHED for r in requests)
        assert all(len(r.token_times_s()) == r.target_output_tokens for r in requests)


class OneAtATime(Policy):
    """Serves only the running request with the least remaining output each step."""

    name: ClassVar[str] = "test-one"

    def running_order(
        self, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request] | None:
        return [min(running, key=lambda r: r.remaining_output_tokens)] if running else None


def test_running_order_selects_who_computes() -> None:
    scheduler = Scheduler(SchedulerConfig(), OneAtATime())
    long, short = make_request("long", prompt=8, output=9), make_request("short", prompt=8, output=3)
    for request in (long, short):
        scheduler.add_request(request, 0.0)
    scheduler.update(scheduler.schedule(0.0), StepResult(1.0))  # both prefilled (waiting admission)
    served = []
    now = 1.0
    while scheduler.has_unfinished():
        plan = scheduler.schedule(now)
        served.append([r.request_id for r in plan.requests()])
        now += 1.0
        scheduler.update(plan, StepResult(now))
    assert served == [["short"], ["short"]] + [["long"]] * 8


def test_speculative_steps_emit_several_tokens_and_keep_kv_consistent() -> None:
    rng = np.random.default_rng(0)
    scheduler = make_scheduler("fcfs", block_size=4, num_gpu_blocks=200, num_lookahead_tokens=3, watermark=0.0)
    requests = random_requests(1, 30, rate=50.0, max_prompt=40, max_output=50)
    for request in requests:
        scheduler.add_request(request, 0.0)
    now = 0.0
    while scheduler.has_unfinished():
        plan = scheduler.schedule(now)
        for request in plan.decode:  # KV holds room for the token and every lookahead slot
            assert scheduler.kv.gpu_blocks_of(request) * 4 >= request.num_computed_tokens + 4
        accepted = {r.request_id: int(rng.integers(1, 5)) for r in plan.decode}
        now += 0.01
        scheduler.update(plan, StepResult(now, accepted_tokens=accepted))
        check_kv(scheduler)
    for request in requests:
        assert len(request.token_times_s()) == request.target_output_tokens
    # several tokens were emitted at one step (equal emission times), as speculation does
    assert any((np.diff(r.token_times_s()) == 0).any() for r in requests)


def test_bad_accepted_token_count_names_the_request() -> None:
    scheduler = make_scheduler("fcfs", num_lookahead_tokens=2)
    request = make_request("r", prompt=4, output=10)
    scheduler.add_request(request, 0.0)
    scheduler.update(scheduler.schedule(0.0), StepResult(1.0))
    plan = scheduler.schedule(1.0)
    with pytest.raises(ValueError, match=r"accepted_tokens\['r'\]"):
        scheduler.update(plan, StepResult(2.0, accepted_tokens={"r": 5}))


def test_speculation_with_swap_preemption_keeps_kv_consistent() -> None:
    rng = np.random.default_rng(3)
    scheduler = make_scheduler(
        "priority-preempt:mode=swap",
        block_size=4,
        num_gpu_blocks=60,
        num_cpu_blocks=200,
        num_lookahead_tokens=3,
        watermark=0.0,
        max_num_batched_tokens=64,
    )
    requests = random_requests(2, 40, rate=40.0, max_prompt=60, max_output=40, num_priorities=4)
    pending = sorted(requests, key=lambda r: r.arrival_time_s)
    now, index = 0.0, 0
    while index < len(pending) or scheduler.has_unfinished():
        while index < len(pending) and pending[index].arrival_time_s <= now:
            scheduler.add_request(pending[index], now)
            index += 1
        plan = scheduler.schedule(now)
        for request in plan.decode:
            assert scheduler.kv.gpu_blocks_of(request) * 4 >= request.num_computed_tokens + 4
        accepted = {r.request_id: int(rng.integers(1, 5)) for r in plan.decode}
        now += 0.01
        scheduler.update(plan, StepResult(now, accepted_tokens=accepted))
        check_kv(scheduler)
    assert sum(r.num_preemptions for r in requests) > 0
    assert all(
        len(r.token_times_s()) == r.target_output_tokens for r in requests if r.state is RequestState.FINISHED
    )
    assert all(r.state is RequestState.FINISHED for r in requests)


StepCall = tuple[tuple[tuple[int, int], ...], int, int, float, float]


class StepRecorder(Policy):
    """FCFS that records every ``on_step`` call; stable between events, so the simulator fast-forwards it."""

    name: ClassVar[str] = "test-step-recorder"
    stable_between_events: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[StepCall] = []

    def on_step(
        self,
        prefill: Sequence[tuple[int, int]],
        num_decode: int,
        decode_context_tokens: int,
        duration_s: float,
        now_s: float,
    ) -> None:
        self.calls.append((tuple(prefill), num_decode, decode_context_tokens, duration_s, now_s))


def test_on_step_reports_each_step_with_its_composition_and_duration() -> None:
    scheduler = Scheduler(SchedulerConfig(max_num_batched_tokens=16), StepRecorder())
    policy = scheduler.policy
    assert isinstance(policy, StepRecorder) and policy.uses_hook("on_step")
    scheduler.add_request(make_request("a", prompt=20, output=3), 0.0)
    scheduler.add_request(make_request("b", prompt=4, output=2), 0.0)
    now_s = 0.0
    while scheduler.has_unfinished():
        plan = scheduler.schedule(now_s)
        now_s += 0.25
        scheduler.update(plan, StepResult(now_s))
    assert policy.calls == [
        (((16, 0),), 0, 0, 0.25, 0.25),  # a's first chunk takes the whole budget
        (((4, 16), (4, 0)), 0, 0, 0.25, 0.5),  # a's last chunk, b's prompt
        ((), 2, 24, 0.25, 0.75),  # a decodes on 20, b on 4: b finishes
        ((), 1, 21, 0.25, 1.0),
    ]


def test_on_step_is_skipped_for_policies_that_do_not_define_it() -> None:
    scheduler = make_scheduler("fcfs")
    assert not scheduler.policy.uses_hook("on_step") and scheduler._on_step is None


def test_on_step_calls_are_identical_with_and_without_fast_forward() -> None:
    latency = load_profile("a100-qwen1.5-7b-batch")
    calls: dict[bool, list[StepCall]] = {}
    events: dict[bool, int] = {}
    steps: dict[bool, int] = {}
    for fast_forward in (True, False):
        policy = StepRecorder()
        instance = Instance(Scheduler(SchedulerConfig(num_gpu_blocks=800), policy), latency)
        requests = random_requests(11, 40, rate=2.0, max_output=300)
        result = Simulation([instance], make_router("round-robin"), fast_forward=fast_forward).run(requests)
        calls[fast_forward] = policy.calls
        events[fast_forward], steps[fast_forward] = result.num_events, result.num_steps
    assert events[True] < events[False] == steps[False]  # fast-forward ran stretches
    assert calls[True] == calls[False]
    assert len(calls[True]) == steps[True]
    for prefill, num_decode, context, duration_s, _ in calls[True]:
        assert duration_s == pytest.approx(latency.step_time_s(prefill, num_decode, context), rel=1e-9)
    computed = sum(sum(lq for lq, _ in c[0]) + c[1] for c in calls[True])
    assert computed == sum(r.prompt_tokens + r.target_output_tokens - 1 for r in requests)  # no preemption here


class CountsEveryFifthToken(Policy):
    """Records the token counts on_tokens hears of, and asks to hear only from every fifth token on."""

    name: ClassVar[str] = "test-every-fifth"

    def __init__(self) -> None:
        super().__init__()
        self.heard: list[tuple[str, int]] = []

    def uses_hook(self, hook: str) -> bool:
        return hook == "on_tokens" or super().uses_hook(hook)

    def on_arrival(self, request: Request, now_s: float) -> None:
        request.notify_tokens_at = 5

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        self.heard.append((request.request_id, request.num_output_tokens))
        request.notify_tokens_at = request.num_output_tokens + 5


@pytest.mark.parametrize("fast_forward", [False, True])
def test_on_tokens_is_skipped_below_notify_tokens_at(fast_forward: bool) -> None:
    """The scheduler calls on_tokens only once a request's count reaches its notify_tokens_at: per step, every
    fifth token; in a fast-forwarded stretch, at the stretch's end when it passed the mark."""
    policy = CountsEveryFifthToken()
    requests = [make_request("a", prompt=8, output=23), make_request("b", prompt=8, output=12, arrival=0.05)]
    instance = Instance(Scheduler(SchedulerConfig(), policy), load_profile("a100-qwen1.5-4b"))
    Simulation([instance], make_router("round-robin"), fast_forward=fast_forward).run(requests)
    assert all(r.state is RequestState.FINISHED for r in requests)
    for request in requests:
        counts = [n for rid, n in policy.heard if rid == request.request_id]
        assert counts and all(b - a >= 5 for a, b in zip(counts, counts[1:], strict=False))
        assert counts[0] >= 5
        if not fast_forward:  # one token per step: heard at exactly every fifth count
            assert counts == list(range(5, request.target_output_tokens + 1, 5))


def test_a_scheduler_taking_a_request_in_resets_notify_tokens_at() -> None:
    """Another scheduler's policy may have set it: a fresh admission hears every token again."""
    scheduler = make_scheduler("fcfs")
    request = make_request("moved", prompt=4, output=3)
    request.notify_tokens_at = 10**9
    scheduler.add_request(request, 0.0)
    assert request.notify_tokens_at == 0


class ProgressKeyWithStaticPromise(Policy):
    """A victim key that reads progress, with a static promise it keeps only by counting the changes it makes:
    the running list must follow the key only when ``victim_key_changes`` moves."""

    name: ClassVar[str] = "test-static-with-changes"
    static_victim_key: ClassVar[bool] = True

    def __init__(self, count_changes: bool) -> None:
        super().__init__()
        self.count_changes = count_changes
        self.boosted: set[str] = set()

    def uses_hook(self, hook: str) -> bool:
        return hook == "on_tokens" or super().uses_hook(hook)

    def victim_key(self, request: Request) -> SortKey:
        return (0 if request.request_id in self.boosted else 1, request.arrival_time_s)

    def on_tokens(self, request: Request, num_tokens: int, now_s: float) -> None:
        if request.request_id == "late" and request.num_output_tokens == 2 and "late" not in self.boosted:
            self.boosted.add("late")
            if self.count_changes:
                self.victim_key_changes += 1


@pytest.mark.parametrize("count_changes", [True, False])
def test_running_is_resorted_when_the_policy_counts_a_key_change(count_changes: bool) -> None:
    policy = ProgressKeyWithStaticPromise(count_changes)
    scheduler = Scheduler(SchedulerConfig(), policy)
    scheduler.add_request(make_request("early", prompt=4, output=20, arrival=0.0), 0.0)
    scheduler.add_request(make_request("late", prompt=4, output=20, arrival=0.0001), 0.0001)
    now = 0.001
    for _ in range(4):
        plan = scheduler.schedule(now)
        now += 0.01
        scheduler.update(plan, StepResult(now))
    order = [r.request_id for r in scheduler.schedule(now).decode]
    # counted: re-sorted by the new key ("late" boosted first); uncounted: the promise holds the old order
    assert order == (["late", "early"] if count_changes else ["early", "late"])


def _nested_queue() -> _WaitingQueue:
    """The reference: every entry nested, (key, sequence, request)."""
    queue = _WaitingQueue()
    queue._width = 0
    return queue


class ShortKeysWhenFresh(Aging):
    """Keys of two lengths in one queue: (priority,) for a request never preempted, the aging key otherwise."""

    name: ClassVar[str] = "test-mixed-key-lengths"

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        return (float(request.priority),) if request.num_preemptions == 0 else super().waiting_key(request, now_s)


class LongerKeysLater(Aging):
    """Keys of one length at a time, a longer one from t = 20 on (a re-key then changes every key's length)."""

    name: ClassVar[str] = "test-key-length-by-time"

    def waiting_key(self, request: Request, now_s: float) -> SortKey:
        key = super().waiting_key(request, now_s)
        return (*key, float(request.num_preemptions)) if now_s >= 20.0 else key


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", [Aging(), ShortKeysWhenFresh(), LongerKeysLater()], ids=lambda p: p.name)
def test_flat_entries_pop_what_nested_ones_do(seed: int, policy: Policy) -> None:
    """The queue keeps keys of one length as flat entries (key items, sequence, request) and nests them all once a
    key of another length comes: whatever was pushed, removed, re-keyed or compacted, it pops and peeks what a
    queue of nested entries does."""
    flat = _WaitingQueue()
    seen = _queue_ops(seed, policy, [flat, _nested_queue()])
    assert len(seen) > 100
    nested_at_end = isinstance(policy, ShortKeysWhenFresh)
    assert (flat._width == 0) is nested_at_end  # (the flat form was in use, or given up, as the keys asked)
