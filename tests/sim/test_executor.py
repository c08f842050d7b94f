"""Tests for semsched/sim/executor.py: a step's engine time, fast-forward pricing, the speculative seam."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pytest

from semsched.core.plan import BatchPlan, ScheduledChunk
from semsched.latency import EngineOverheads, load_profile
from semsched.sim.engine import Instance, Simulation
from semsched.sim.executor import SCALAR_STRETCH_STEPS, ModelExecutor, SimulationError
from semsched.sim.router import make_router
from semsched.sim.speed import SpeedTrace
from tests.support import make_request, make_scheduler

LATENCY = load_profile("a100-qwen1.5-4b")


def _decode_plan(num_decode: int = 4, context: int = 400) -> BatchPlan:
    requests = [make_request(str(i), prompt=100, output=50) for i in range(num_decode)]
    return BatchPlan(time_s=0.0, decode=requests, decode_context_tokens=context)


def _prefill_plan(tokens: int = 64) -> BatchPlan:
    request = make_request("p", prompt=tokens)
    return BatchPlan(time_s=0.0, prefill=[ScheduledChunk(request, tokens, 0)])


def test_a_step_lasts_the_model_time_plus_the_intake_charged_since_the_last_step() -> None:
    executor = ModelExecutor(LATENCY, overheads=EngineOverheads(arrival_s=0.01, idle_wakeup_s=0.1))
    plan = _prefill_plan()
    step_s = LATENCY.step_time_s([(64, 0)], 0, 0)
    executor.take_arrival(engine_idle=True)
    executor.take_arrival(engine_idle=False)
    assert executor.execute(plan, 5.0).end_time_s == pytest.approx(5.0 + 0.01 + 0.1 + 0.01 + step_s)
    assert executor.execute(plan, 6.0).end_time_s == 6.0 + step_s  # charged once


def test_a_new_batch_size_costs_new_shape_s_once_and_warm_sizes_never() -> None:
    executor = ModelExecutor(LATENCY, overheads=EngineOverheads(new_shape_s=0.5), warm_shapes=(4,))
    step_s = executor.step_time_s(_prefill_plan())
    assert executor.execute(_prefill_plan(), 0.0).end_time_s == pytest.approx(0.5 + step_s)
    assert executor.execute(_prefill_plan(), 0.0).end_time_s == step_s
    assert executor.execute(_decode_plan(4), 0.0).end_time_s == executor.step_time_s(_decode_plan(4))


def test_the_machine_speed_scales_the_whole_engine_time() -> None:
    overheads = EngineOverheads(arrival_s=0.01)
    slow = ModelExecutor(LATENCY, overheads=overheads, speed=SpeedTrace(10.0, (1.0, 3.0)))
    step_s = slow.step_time_s(_prefill_plan())
    slow.take_arrival(engine_idle=False)
    assert slow.execute(_prefill_plan(), 12.0).end_time_s == pytest.approx(12.0 + 3.0 * (0.01 + step_s))
    assert not slow.can_repeat(_decode_plan(), 0.0, np.inf)  # its factor may change between steps


@pytest.mark.parametrize("steps", [SCALAR_STRETCH_STEPS, SCALAR_STRETCH_STEPS + 8])  # step by step; at once
def test_repeated_decode_steps_end_exactly_where_single_steps_would(steps: int) -> None:
    plan = _decode_plan(num_decode=3, context=300)
    stepped, now_s = ModelExecutor(LATENCY), 2.5
    singles = []
    for i in range(steps):
        step = BatchPlan(0.0, decode=plan.decode, decode_context_tokens=300 + 3 * i)
        now_s = stepped.execute(step, now_s).end_time_s
        singles.append(now_s)
    repeated = ModelExecutor(LATENCY).execute_repeated(plan, 2.5, steps, np.inf)
    assert repeated == singles
    # only steps that end before the next arrival join the stretch; fewer than two: none
    cut = ModelExecutor(LATENCY).execute_repeated(plan, 2.5, steps, singles[9])
    assert cut == singles[:9]
    assert ModelExecutor(LATENCY).execute_repeated(plan, 2.5, steps, singles[1]) is None


def test_an_intake_or_a_new_shape_to_charge_stops_fast_forward() -> None:
    executor = ModelExecutor(LATENCY, overheads=EngineOverheads(arrival_s=0.01, new_shape_s=0.1))
    plan = _decode_plan(4)
    executor.take_arrival(engine_idle=False)
    assert not executor.can_repeat(plan, 0.0, np.inf)
    executor.execute(plan, 0.0)  # charges the intake and warms the size
    assert executor.can_repeat(plan, 0.0, np.inf)
    assert not executor.can_repeat(plan, 0.0, executor.step_time_s(plan))  # a second step would start too late


@dataclass(frozen=True)
class _Constant:
    """A latency model in which every step takes ``step_s``."""

    step_s: float
    name: str = "absurd"

    def step_time_s(self, prefill: object, num_decode: int, decode_context_tokens: int) -> float:
        return self.step_s

    def decode_times_s(self, num_decode: int, decode_context_tokens: int, num_steps: int) -> np.ndarray:
        return np.full(num_steps, self.step_s)

    def swap_time_s(self, num_tokens: int) -> float:
        return 0.0


def _absurd(step_s: float) -> _Constant:
    return _Constant(step_s)


@pytest.mark.parametrize("step_s", [float("inf"), float("nan"), -1.0])
def test_a_step_time_that_is_not_a_finite_number_is_a_simulation_error(step_s: float) -> None:
    with pytest.raises(SimulationError, match=r"absurd: a step of 64 tokens starting at 1.0 s would end at"):
        ModelExecutor(_absurd(step_s)).execute(_prefill_plan(), 1.0)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_time_that_overflows_is_a_simulation_error_not_a_crash(fast_forward: bool) -> None:
    # each step takes 1e308 s: the second one would end at infinity
    instance = Instance(make_scheduler(), _absurd(1e308))
    simulation = Simulation([instance], make_router("round-robin"), fast_forward=fast_forward)
    with pytest.raises(SimulationError, match="finite time >= 0"):
        simulation.run([make_request("a", prompt=64, output=10)])


class _AcceptAll:
    """Every draft accepted: each decode emits 1 + lookahead tokens."""

    def __init__(self, lookahead: int) -> None:
        self.lookahead = lookahead
        self.calls = 0

    def accepted_tokens(self, plan: BatchPlan, end_time_s: float) -> Mapping[str, int]:
        self.calls += 1
        return {r.request_id: 1 + self.lookahead for r in plan.decode}


def test_draft_acceptance_decides_how_many_tokens_a_decode_emits() -> None:
    drafts = _AcceptAll(lookahead=2)
    request = make_request("x", prompt=64, output=10)
    executor = ModelExecutor(LATENCY, drafts=drafts)
    instance = Instance(make_scheduler("fcfs", num_lookahead_tokens=2), executor=executor)
    result = Simulation([instance], make_router("round-robin")).run([request])
    times = request.token_times_s().tolist()
    # the prompt's step emits one token, then three decode steps emit three each
    assert len(times) == 10 and result.num_steps == 4 and drafts.calls == 4
    assert times[1] == times[2] == times[3] < times[4] == times[5] == times[6] < times[7] == times[9]


def test_an_instance_takes_a_latency_model_or_an_executor() -> None:
    with pytest.raises(TypeError, match="give a latency model or an executor"):
        Instance(make_scheduler())
    with pytest.raises(TypeError, match="not both"):
        Instance(make_scheduler(), LATENCY, executor=ModelExecutor(LATENCY))
    with pytest.raises(TypeError, match="latency: expected a LatencyModel, got str"):
        ModelExecutor("a100")  # type: ignore[arg-type]


class _Delegating:
    """An executor of another type than ModelExecutor (the engine calls it through its protocol), asking a
    ModelExecutor of a latency model of another type than the analytic one (priced through its protocol)."""

    def __init__(self) -> None:
        self.inner = ModelExecutor(_Analytic(LATENCY))  # type: ignore[arg-type]
        self.calls = 0

    def __getattr__(self, name: str) -> object:
        self.calls += 1
        return getattr(self.inner, name)


@dataclass(frozen=True)
class _Analytic:
    """The analytic profile behind another type."""

    model: object

    def __getattr__(self, name: str) -> object:
        return getattr(self.model, name)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_an_executor_or_latency_model_of_another_type_gives_the_same_run(fast_forward: bool) -> None:
    """The compiled engine calls a ModelExecutor, and it the analytic model, natively; any other executor or model
    goes through its protocol, with the same result."""

    def run(executor: object) -> list[list[float]]:
        requests = [make_request(str(i), prompt=64 + 40 * i, output=5 + 7 * i, arrival=0.01 * i)
                    for i in range(12)]
        instance = Instance(make_scheduler(), executor=executor)  # type: ignore[arg-type]
        Simulation([instance], make_router("round-robin"), fast_forward=fast_forward).run(requests)
        return [r.token_times_s().tolist() for r in requests]

    delegating = _Delegating()
    assert run(delegating) == run(ModelExecutor(LATENCY))
    assert delegating.calls > 0
