"""Tests for semsched/sim/ground_truth.py and the noisy executor: real step times that differ from the profile."""

from __future__ import annotations

import math

import numpy as np
import pytest

from semsched.core.plan import BatchPlan
from semsched.latency import load_profile
from semsched.sim.executor import ModelExecutor
from semsched.sim.ground_truth import GroundTruth, LinearDrift, SineDrift, TruthSampler
from semsched.sim.runner import ClusterSpec, PolicyRun, run_policy
from semsched.sim.speed import SpeedTrace
from semsched.workloads import build_workload
from tests.support import make_request

LATENCY = load_profile("a100-qwen1.5-7b-batch")


def _decode_plan(num_decode: int = 4, context: int = 400) -> BatchPlan:
    requests = [make_request(str(i), prompt=100, output=50) for i in range(num_decode)]
    return BatchPlan(time_s=0.0, decode=requests, decode_context_tokens=context)


def _factors(truth: GroundTruth, count: int, stream: int = 0) -> list[float]:
    sampler = truth.sampler(stream)
    return [sampler.factor(float(i)) for i in range(count)]


def test_the_noise_is_reproducible_for_a_seed_and_differs_between_seeds_and_streams() -> None:
    truth = GroundTruth(noise=0.1, seed=7)
    assert _factors(truth, 50) == _factors(GroundTruth(noise=0.1, seed=7), 50)
    assert _factors(truth, 50) != _factors(GroundTruth(noise=0.1, seed=8), 50)
    assert _factors(truth, 50) != _factors(truth, 50, stream=1)


def test_uniform_noise_stays_in_its_band_and_lognormal_has_mean_one() -> None:
    uniform = np.array(_factors(GroundTruth(noise=0.1), 20_000))
    assert uniform.min() >= 0.9 and uniform.max() <= 1.1
    assert uniform.mean() == pytest.approx(1.0, abs=0.005)
    lognormal = np.array(_factors(GroundTruth(noise=0.1, distribution="lognormal"), 20_000))
    assert lognormal.mean() == pytest.approx(1.0, abs=0.005)
    assert lognormal.std() == pytest.approx(0.1, rel=0.05)


def test_without_noise_the_factor_is_the_drift() -> None:
    drift = LinearDrift(end=2.0, duration_s=10.0)
    sampler = GroundTruth(drift=drift).sampler()
    assert [sampler.factor(t) for t in (-1.0, 0.0, 5.0, 10.0, 99.0)] == [1.0, 1.0, 1.5, 2.0, 2.0]
    assert SineDrift(amplitude=0.2, period_s=4.0).factor_at(1.0) == pytest.approx(1.2)
    trace = SpeedTrace(1.0, (1.0, 3.0))
    assert GroundTruth(drift=trace).sampler().real_time_s(0.5, 1.5) == 1.5


def test_a_noisy_executor_is_reproducible_and_never_fast_forwards() -> None:
    def end_times(seed: int) -> list[float]:
        executor = ModelExecutor(LATENCY, truth=GroundTruth(noise=0.1, seed=seed).sampler())
        assert not executor.can_repeat(_decode_plan(), 0.0, math.inf)
        return [executor.execute(_decode_plan(), float(t)).end_time_s for t in range(20)]

    model_s = ModelExecutor(LATENCY).step_time_s(_decode_plan())
    first = end_times(1)
    assert first == end_times(1) and first != end_times(2)
    assert all(0.9 * model_s <= end - t <= 1.1 * model_s * (1 + 1e-12) for t, end in enumerate(first))
    assert len({round(end - t, 12) for t, end in enumerate(first)}) > 1


def test_an_executor_with_an_exact_truth_matches_one_without() -> None:
    plan = _decode_plan()
    exact = ModelExecutor(LATENCY, truth=GroundTruth().sampler())
    assert exact.execute(plan, 3.0).end_time_s == ModelExecutor(LATENCY).execute(plan, 3.0).end_time_s


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"noise": -0.1}, r"noise: must be in \[0, 1\)"),
        ({"noise": 1.0}, r"noise: must be in \[0, 1\)"),
        ({"distribution": "gaussian"}, "distribution: must be 'uniform' or 'lognormal'"),
        ({"seed": -1}, "seed: must be an integer >= 0"),
    ],
)
def test_ground_truth_errors_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GroundTruth(**kwargs)  # type: ignore[arg-type]


def test_drift_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="duration_s: must be a finite number > 0"):
        LinearDrift(end=1.5, duration_s=0.0)
    with pytest.raises(ValueError, match=r"amplitude: must be in \[0, 1\)"):
        SineDrift(amplitude=1.0, period_s=1.0)
    with pytest.raises(TypeError, match="truth: expected TruthSampler"):
        ModelExecutor(LATENCY, truth=GroundTruth())  # type: ignore[arg-type]
    assert isinstance(GroundTruth().sampler(), TruthSampler)


def test_the_cluster_spec_carries_the_ground_truth_into_a_run() -> None:
    workload = build_workload("azure-conv", rate_per_s=2.0, seed=0, num_requests=30)
    cluster = ClusterSpec(profile="a100-qwen1.5-7b-batch", ground_truth=GroundTruth(noise=0.1, seed=4))
    exact = run_policy(workload, "fcfs", ClusterSpec(profile="a100-qwen1.5-7b-batch"))
    noisy = run_policy(workload, "fcfs", cluster)
    again = run_policy(workload, "fcfs", cluster)

    def finish_times(run: PolicyRun) -> list[float | None]:
        return [r.finish_time_s for r in run.requests]

    assert finish_times(noisy) == finish_times(again)
    assert finish_times(noisy) != finish_times(exact)
