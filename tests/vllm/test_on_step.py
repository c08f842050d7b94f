"""The vLLM adapter's ``on_step``: each step's composition from its SchedulerOutput and its measured duration."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

import semsched.vllm.scheduler as adapter_module
from semsched.core.policy import Policy
from semsched.core.request import Request
from semsched.core.scheduler import charge_service
from semsched.policies import POLICIES, register_policy
from semsched.policies.attained import attained_s
from semsched.policies.las import LAS
from semsched.vllm.harness import HarnessConfig, SchedulerHarness
from tests.support import make_request

Call = tuple[tuple[tuple[int, int], ...], int, int, float, float]


class _StepLog(Policy):
    """FCFS that records every ``on_step`` call."""

    name: ClassVar[str] = "test-on-step-log"

    def __init__(self, config: object = None) -> None:
        super().__init__(None)
        self.calls: list[Call] = []

    def on_step(
        self,
        prefill: Sequence[tuple[int, int]],
        num_decode: int,
        decode_context_tokens: int,
        duration_s: float,
        now_s: float,
    ) -> None:
        self.calls.append((tuple(prefill), num_decode, decode_context_tokens, duration_s, now_s))


class _ServiceLog(LAS):
    """LAS that records every ``on_step`` duration and each request's attained service when it finishes."""

    name: ClassVar[str] = "test-service-log"

    def __init__(self, config: object = None) -> None:
        super().__init__(None)
        self.durations: list[float] = []
        self.served: dict[str, float] = {}
        self.rounds: dict[str, tuple[int, float, int]] = {}  # (service_rounds, round_service_s, round_tokens)

    def on_step(
        self, prefill: Sequence[tuple[int, int]], num_decode: int, decode_context_tokens: int, duration_s: float,
        now_s: float,
    ) -> None:
        self.durations.append(duration_s)
        super().on_step(prefill, num_decode, decode_context_tokens, duration_s, now_s)

    def on_finish(self, request: Request, now_s: float) -> None:
        self.served[request.request_id] = attained_s(request)
        self.rounds[request.request_id] = (request.service_rounds, request.round_service_s, request.round_tokens)


class _ServiceOnly(LAS):
    """LAS (no ``on_step`` of its own: the adapter times its steps for the service alone) that records each
    request's attained service when it finishes."""

    name: ClassVar[str] = "test-service-only"

    def __init__(self, config: object = None) -> None:
        super().__init__(None)
        self.served: dict[str, float] = {}

    def on_finish(self, request: Request, now_s: float) -> None:
        self.served[request.request_id] = attained_s(request)


@pytest.fixture(autouse=True, scope="module")
def _test_policy() -> Iterator[None]:
    for cls in (_StepLog, _ServiceLog, _ServiceOnly):
        register_policy(cls)
    yield
    for cls in (_StepLog, _ServiceLog, _ServiceOnly):
        POLICIES.unregister(cls.name)


class _TickingClock:
    """``time.time()`` that advances 1 ms per call: durations are deterministic and positive."""

    def __init__(self) -> None:
        self.now_s = 1_000.0

    def time(self) -> float:
        self.now_s += 0.001
        return self.now_s


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_on_step_gets_each_steps_composition_and_a_positive_duration(
    tiny_model_dir: Path, async_scheduling: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter_module, "time", _TickingClock())
    h = SchedulerHarness(
        "semsched.vllm.Scheduler", tiny_model_dir, HarnessConfig(async_scheduling=async_scheduling),
        env={"SEMSCHED_POLICY": _StepLog.name},
    )
    rng = random.Random(0)
    prompts = {"a": 10, "b": 20, "c": 30}
    for request_id, length in prompts.items():
        h.add(request_id, [rng.randrange(100, 31000) for _ in range(length)], 4)
    scheduled = [r.num_scheduled_tokens for r in h.run() if r.num_scheduled_tokens]
    policy = h.scheduler.semsched_policy
    assert isinstance(policy, _StepLog)
    calls = policy.calls
    # one call per scheduled batch, in the order the batches were scheduled (outputs paired with their batch)
    assert [sum(lq for lq, _ in c[0]) + c[1] for c in calls] == [sum(s.values()) for s in scheduled]
    assert calls[0][:3] == (((10, 0), (20, 0), (30, 0)), 0, 0)  # the three prompts, nothing cached
    decode_only = [c for c in calls if not c[0]]
    assert decode_only and decode_only[0][1:3] == (3, 10 + 20 + 30)  # first decodes on the prompts
    assert all(c[3] > 0 for c in calls)
    assert [c[4] for c in calls] == sorted(c[4] for c in calls)


def test_policies_without_on_step_are_not_timed(tiny_model_dir: Path) -> None:
    h = SchedulerHarness("semsched.vllm.Scheduler", tiny_model_dir, env={"SEMSCHED_POLICY": "fcfs"})
    h.add("a", [101] * 8, 2)
    h.run()
    assert h.scheduler._on_step is None and not h.scheduler._steps_in_flight


def _three_requests_served(
    tiny_model_dir: Path, async_scheduling: bool, policy: str, monkeypatch: pytest.MonkeyPatch
) -> SchedulerHarness:
    """Three requests of 10 prompt and 6 output tokens, run together under ``policy`` on a fresh ticking clock."""
    monkeypatch.setattr(adapter_module, "time", _TickingClock())
    h = SchedulerHarness(
        "semsched.vllm.Scheduler", tiny_model_dir, HarnessConfig(async_scheduling=async_scheduling),
        env={"SEMSCHED_POLICY": policy},
    )
    for request_id in ("a", "b", "c"):
        h.add(request_id, [101] * 10, 6)
    h.run()
    return h


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_a_steps_tokens_are_charged_its_measured_duration(
    tiny_model_dir: Path, async_scheduling: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's tokens are reported at the instant its ``on_step`` names, as the core reports them, and the
    adapter charges each request's attained service (las, laps-sd) the duration of every step it emitted in.
    Three requests run together from start to end, so each is charged every step's duration."""
    h = _three_requests_served(tiny_model_dir, async_scheduling, _ServiceLog.name, monkeypatch)
    policy = h.scheduler.semsched_policy
    assert isinstance(policy, _ServiceLog)
    assert len(policy.durations) == 6 and all(d > 0 for d in policy.durations)
    total = 0.0
    for duration in policy.durations:
        total += duration
    assert policy.served == {"a": total, "b": total, "c": total}
    # the rounds (every step after the first token's) as the core's charge_service counts them, step by step
    reference = make_request("reference", prompt=10, output=6)
    for duration in policy.durations:
        reference.num_output_tokens += 1
        charge_service(reference, [duration], 1)
    assert reference.service_s == total and reference.service_rounds == 5
    rounds = (reference.service_rounds, reference.round_service_s, reference.round_tokens)
    assert policy.rounds == {"a": rounds, "b": rounds, "c": rounds}
    # plain las has no on_step: the adapter times the steps for the service alone, on the same ticking clock
    plain = _three_requests_served(tiny_model_dir, async_scheduling, _ServiceOnly.name, monkeypatch)
    only = plain.scheduler.semsched_policy
    assert isinstance(only, _ServiceOnly) and plain.scheduler._on_step is None
    assert only.served == policy.served


def _composition(output: Any, requests: dict[str, Any]) -> tuple[tuple[tuple[int, int], ...], int, int]:
    """A scheduled batch's composition in ``on_step``'s terms, request by request (the adapter's slow form)."""
    scheduled = output.num_scheduled_tokens
    prefill = [(scheduled[new.req_id], new.num_computed_tokens) for new in output.scheduled_new_reqs]
    num_decode = context = 0
    cached = output.scheduled_cached_reqs
    for request_id, computed in zip(cached.req_ids, cached.num_computed_tokens, strict=True):
        request = requests.get(request_id)
        if scheduled[request_id] == 1 and request is not None and computed >= request.num_prompt_tokens:
            num_decode += 1
            context += computed
        else:
            prefill.append((scheduled[request_id], computed))
    return tuple(prefill), num_decode, context


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_on_step_composition_matches_the_batch_request_by_request(
    tiny_model_dir: Path, async_scheduling: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On workloads larger than the KV cache (chunked prompts, preemptions, resumptions, finishes, steady decode
    stretches, where the adapter reuses the prompt lengths it looked up for the same requests), each
    ``on_step`` names the composition a request-by-request pass over its batch finds."""
    monkeypatch.setattr(adapter_module, "time", _TickingClock())
    for seed in range(3):
        h = SchedulerHarness(
            "semsched.vllm.Scheduler", tiny_model_dir,
            HarnessConfig(num_blocks=25, max_num_seqs=8, max_num_batched_tokens=128,
                          async_scheduling=async_scheduling),
            env={"SEMSCHED_POLICY": _StepLog.name},
        )
        scheduler, expected = h.scheduler, []
        schedule = scheduler.schedule

        def logged_schedule(schedule: Any = schedule, scheduler: Any = scheduler,
                            expected: list[Any] = expected) -> Any:
            output = schedule()
            if output.total_num_scheduled_tokens:
                expected.append(_composition(output, scheduler.requests))
            return output

        scheduler.schedule = logged_schedule  # type: ignore[method-assign]
        rng = random.Random(seed)
        pending = sorted((rng.randrange(60), f"r{i}", rng.randrange(8, 300), rng.randrange(4, 90))
                         for i in range(24))
        preempted, step = 0, 0
        while pending or h.has_work():
            while pending and pending[0][0] <= step:
                _, request_id, prompt, output = pending.pop(0)
                h.add(request_id, [rng.randrange(100, 31000) for _ in range(prompt)], output)
            preempted += len(h.step().preempted)
            step += 1
        policy = scheduler.semsched_policy
        assert isinstance(policy, _StepLog)
        assert preempted > 0 and any(c[1] > 1 and not c[0] for c in policy.calls)
        assert [c[:3] for c in policy.calls] == expected
