"""Factories shared by the test modules: requests, schedulers, a checked step loop, simulations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from semsched.core.plan import BatchPlan, StepResult
from semsched.core.request import Request
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency import EngineOverheads, load_profile
from semsched.policies import make_policy
from semsched.sim.engine import Instance, SimResult, Simulation
from semsched.sim.router import make_router
from semsched.sim.speed import SpeedTrace


def make_request(
    request_id: str = "r0",
    *,
    prompt: int = 32,
    output: int = 8,
    arrival: float = 0.0,
    priority: int = 0,
    max_output: int | None = None,
    **fields: object,
) -> Request:
    return Request(
        request_id,
        prompt_tokens=prompt,
        max_output_tokens=max_output if max_output is not None else output,
        arrival_time_s=arrival,
        output_tokens=output,
        priority=priority,
        **fields,  # type: ignore[arg-type]
    )


def random_requests(
    seed: int,
    count: int,
    *,
    rate: float = 4.0,
    max_prompt: int = 600,
    max_output: int = 200,
    num_priorities: int = 3,
    with_slos: bool = False,
) -> list[Request]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, count))
    prompts = rng.integers(1, max_prompt + 1, count)
    outputs = rng.integers(1, max_output + 1, count)
    priorities = rng.integers(0, num_priorities, count)
    return [
        make_request(
            str(i),
            prompt=int(prompts[i]),
            output=int(outputs[i]),
            arrival=float(arrivals[i]),
            priority=int(priorities[i]),
            ttft_slo_s=2.0 if with_slos else None,
            e2e_slo_s=30.0 if with_slos else None,
        )
        for i in range(count)
    ]


def near_capacity_shares(
    *, max_count: int = 4, max_share: float = 0.9
) -> st.SearchStrategy[list[tuple[float, int]]]:
    """Hypothesis: 0 to ``max_count`` long-context requests as ``(share, output)``: each whole sequence is
    ``share`` (from 0.5 to ``max_share``) of the KV cache's tokens, its output 1-64 tokens of it (see
    :func:`with_long_requests`): requests that fit only alone or nearly, which no workload of
    :func:`random_requests` holds (issue 28)."""
    share = st.floats(0.5, max_share, allow_nan=False)
    return st.lists(st.tuples(share, st.integers(1, 64)), max_size=max_count)


def with_long_requests(
    requests: list[Request], shares: Sequence[tuple[float, int]], capacity_tokens: int, seed: int
) -> list[Request]:
    """``requests`` plus one request per ``(share, output)`` of ``shares`` (:func:`near_capacity_shares`), its
    whole sequence ``share`` of ``capacity_tokens`` (ids ``long0``, ...), arriving at random within the
    workload's span, of random priority 0-2; in arrival order."""
    rng = np.random.default_rng(seed)
    span_s = max((r.arrival_time_s for r in requests), default=0.0)
    longs = []
    for i, (share, output) in enumerate(shares):
        total = max(2, int(share * capacity_tokens))
        output = min(output, total - 1)
        longs.append(make_request(f"long{i}", prompt=total - output, output=output,
                                  arrival=float(rng.uniform(0.0, span_s)), priority=int(rng.integers(0, 3))))
    return sorted([*requests, *longs], key=lambda r: r.arrival_time_s)


def make_scheduler(policy: str = "fcfs", **config: object) -> Scheduler:
    return Scheduler(SchedulerConfig(**config), make_policy(policy))  # type: ignore[arg-type]


def simulate(
    requests: Sequence[Request],
    policy: str = "fcfs",
    *,
    fast_forward: bool = True,
    instances: int = 1,
    router: str = "round-robin",
    profile: str = "a100-qwen1.5-4b",
    overheads: EngineOverheads | None = None,
    warm_shapes: Sequence[int] = (),
    speed: SpeedTrace | None = None,
    **config: object,
) -> SimResult:
    latency = load_profile(profile)
    cluster = [
        Instance(
            make_scheduler(policy, **config),
            latency,
            overheads=overheads or EngineOverheads(),
            warm_shapes=set(warm_shapes),
            speed=speed,
        )
        for _ in range(instances)
    ]
    return Simulation(cluster, make_router(router), fast_forward=fast_forward).run(requests)


#: check_kv walks every request of the scheduler (running and waiting) for the CPU pool's count only every
#: KV_WALK_EVERY-th call while nothing is swapped out; see check_kv.
KV_WALK_EVERY = 16
_kv_calls = 0


def check_kv(scheduler: Scheduler, *, walk: bool | None = None) -> None:
    """Allocated + free == total, and no block is held twice (GPU and CPU); with nothing left to do, no block is
    held at all.

    The GPU check (every block of every table) is made on every call: it costs what the tables hold. The CPU
    pool's count asks every request of the scheduler for its swapped blocks, which at thousands of waiting
    requests costs more than the step it checks; it is made on every call while some CPU block is in use, and
    otherwise (when the count can only be wrong by a request holding blocks that are also free, which is still
    wrong when that request lets them go: then more blocks are free than there are, checked every call) on every
    ``KV_WALK_EVERY``-th call and whenever the scheduler has nothing left to do; ``walk`` forces it on or off.
    tests/core/test_check_kv.py breaks the accounting on purpose and sees each kind of break caught.
    """
    global _kv_calls
    _kv_calls += 1
    kv = scheduler.kv
    tables = kv.gpu_tables()
    held = [b for table in tables.values() for b in table]
    hashes, refs, evictable = kv.cache_state()
    shared = [b for b in held if b in refs]
    private = [b for b in held if b not in refs]
    assert len(private) == len(set(private)), "a GPU block is held twice"
    check_prefix_cache(hashes, refs, evictable, shared, set(private))
    distinct = len(private) + len(refs)
    assert distinct + kv.num_free_gpu_blocks == kv.num_gpu_blocks, "GPU blocks held + free != total"
    assert 0 <= kv.num_free_cpu_blocks <= kv.num_cpu_blocks, "more CPU blocks free than there are"
    drained = not scheduler.has_unfinished()
    if drained:
        assert not held, f"nothing left to do, yet {len(held)} GPU blocks are held"
    if walk is None:
        walk = drained or kv.num_free_cpu_blocks < kv.num_cpu_blocks or _kv_calls % KV_WALK_EVERY == 0
    if walk:
        cpu_held = [b for r in _all_requests(scheduler) for b in kv.cpu_block_table(r)]
        assert len(cpu_held) == len(set(cpu_held)), "a CPU block is held twice"
        assert len(cpu_held) + kv.num_free_cpu_blocks == kv.num_cpu_blocks, "CPU blocks held + free != total"


def check_prefix_cache(hashes: dict[int, int], refs: dict[int, int], evictable: tuple[int, ...],
                       shared: list[int], private: set[int]) -> None:
    """Prefix-cache invariants: every cached block is either held (its reference count is the number of tables
    that hold it) or evictable, never both, and no hash names two blocks; no uncached block is shared."""
    assert len(set(hashes.values())) == len(hashes), "two cached blocks under one hash"
    assert not set(refs) & set(evictable), "a cached block is both held and evictable"
    assert set(refs) | set(evictable) == set(hashes), "a cached block is neither held nor evictable"
    assert len(set(evictable)) == len(evictable), "a block is evictable twice"
    counts: dict[int, int] = {}
    for block in shared:
        counts[block] = counts.get(block, 0) + 1
    assert counts == refs, "a cached block's reference count differs from the tables that hold it"
    assert not private & set(hashes), "a block is both private and cached"


def _all_requests(scheduler: Scheduler) -> list[Request]:
    return list(scheduler.running_requests()) + scheduler.waiting_requests()


def check_plan(scheduler: Scheduler, plan: BatchPlan) -> None:
    config = scheduler.config
    assert plan.num_tokens <= config.max_num_batched_tokens
    assert plan.num_seqs <= config.max_num_seqs
    assert scheduler.num_running <= config.max_num_seqs
    ids = [r.request_id for r in plan.requests()]
    assert len(ids) == len(set(ids))
    for chunk in plan.prefill:
        assert 1 <= chunk.num_tokens <= chunk.request.num_uncomputed_tokens
    for request in plan.decode:
        assert request.num_uncomputed_tokens == 1


def run_checked(
    scheduler: Scheduler, requests: Sequence[Request], step_s: float = 0.01, max_steps: int = 200_000
) -> int:
    """Drive ``scheduler`` step by step with a fixed step time, checking invariants after every step."""
    pending = sorted(requests, key=lambda r: r.arrival_time_s)
    now, index, steps = 0.0, 0, 0
    while index < len(pending) or scheduler.has_unfinished():
        while index < len(pending) and pending[index].arrival_time_s <= now:
            scheduler.add_request(pending[index], now)
            index += 1
        plan = scheduler.schedule(now)
        check_plan(scheduler, plan)
        check_kv(scheduler)
        if plan.is_empty:
            if index >= len(pending):
                assert not scheduler.has_unfinished(), "scheduler stalled with unfinished requests"
                break
            now = max(now, pending[index].arrival_time_s)
            continue
        now += step_s
        scheduler.update(plan, StepResult(end_time_s=now))
        check_kv(scheduler)
        steps += 1
        assert steps <= max_steps, f"no progress after {max_steps} steps (livelock?)"
    return steps


class CallCounter:
    """Counts the calls of ``owner.name`` from now on: set in its place on the instance, it calls the original."""

    def __init__(self, owner: object, name: str) -> None:
        self.calls = 0
        self._original = getattr(owner, name)
        setattr(owner, name, self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self._original(*args, **kwargs)
