"""Estimator correction: PROSERVE's batch latency estimator (seed 001 §4.1) with and without its online correction.

A simulated engine runs a workload with real step times that differ from the profile the scheduler estimates
with (:mod:`semsched.sim.ground_truth`): 10 % multiplicative noise per step, uniform (U(0.9, 1.1)) or lognormal
(standard deviation 10 %), without drift and with a slow linear drift (the engine 1.0x to ``--drift-end`` x slower
over ``--drift-s`` seconds). The FCFS policy carries a :class:`~semsched.latency.correction.CorrectedEstimator`
fed from ``on_step``: every step is predicted before it is observed. Printed per scenario: the MAPE of the base
profile (uncorrected), of the corrected estimator, and of an oracle that knows the drift but not the noise (the
floor no estimator of the mean can beat: with i.i.d. noise each step's own draw is unpredictable).

Issue target: MAPE with correction <= 5 % in simulation with 10 % noise. With uniform +-10 % noise the oracle
floor is about 5.0 % (E|1 - 1/U|), so the target is at the floor; with lognormal 10 % it is about 8 %, so the
target cannot be met by any estimator. Every figure is measured in the run. Run:
``.venv/bin/python benchmarks/estimator_correction.py``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from common import ResultTable, at_least, dump_json, make_console, target_line

from semsched.core.policy import Policy
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency import load_profile
from semsched.latency.batch import BatchLatencyModel
from semsched.latency.correction import CorrectedEstimator, CorrectionConfig, CorrectionStats
from semsched.sim.engine import Instance, Simulation
from semsched.sim.executor import ModelExecutor
from semsched.sim.ground_truth import Drift, GroundTruth, LinearDrift, NoiseDistribution
from semsched.sim.router import make_router
from semsched.workloads import build_workload

PROFILE = "a100-qwen1.5-7b-batch"
NOISE = 0.10
TARGET_MAPE = 0.05


class EstimatingFcfs(Policy):
    """FCFS whose estimator learns from every step it runs; also scores an oracle that knows the drift."""

    name: ClassVar[str] = "bench-estimating-fcfs"

    def __init__(self, estimator: CorrectedEstimator, drift: Drift | None) -> None:
        super().__init__()
        self.estimator = estimator
        self.drift = drift
        self.oracle_ape_sum = 0.0

    def on_step(
        self,
        prefill: Sequence[tuple[int, int]],
        num_decode: int,
        decode_context_tokens: int,
        duration_s: float,
        now_s: float,
    ) -> None:
        base_s = self.estimator.model.step_time_s(prefill, num_decode, decode_context_tokens)
        if base_s > 0 and duration_s > 0:
            factor = 1.0 if self.drift is None else self.drift.factor_at(now_s - duration_s)
            self.oracle_ape_sum += abs(base_s * factor - duration_s) / duration_s
        self.estimator.observe(prefill, num_decode, decode_context_tokens, duration_s, now_s)


def run_scenario(
    model: BatchLatencyModel, args: argparse.Namespace, distribution: NoiseDistribution, drift: Drift | None
) -> tuple[CorrectionStats, float]:
    """One simulated run: the estimator's stats and the oracle's MAPE."""
    workload = build_workload("azure-conv", rate_per_s=args.rate, seed=args.seed, num_requests=args.num_requests)
    policy = EstimatingFcfs(CorrectedEstimator(model, CorrectionConfig()), drift)
    truth = GroundTruth(noise=NOISE, distribution=distribution, drift=drift, seed=args.seed)
    instance = Instance(Scheduler(SchedulerConfig(), policy), executor=ModelExecutor(model, truth=truth.sampler()))
    Simulation([instance], make_router("round-robin")).run(workload.to_requests())
    stats = policy.estimator.stats()
    return stats, policy.oracle_ape_sum / max(stats.num_steps, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-requests", type=at_least(10), default=3000)
    parser.add_argument("--rate", type=float, default=6.0, help="arrivals per second (azure-conv)")
    parser.add_argument("--drift-end", type=float, default=1.5, help="engine factor at the end of the drift")
    parser.add_argument("--drift-s", type=float, default=300.0, help="seconds over which the drift happens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()
    model = load_profile(PROFILE)
    assert isinstance(model, BatchLatencyModel), f"{PROFILE} is a batch profile"
    linear = LinearDrift(end=args.drift_end, duration_s=args.drift_s)
    drift_name = f"1.0x to {args.drift_end:g}x over {args.drift_s:g} s"
    drifts: dict[str, Drift | None] = {"none": None, drift_name: linear}
    table = ResultTable(
        f"Estimator MAPE, {PROFILE}, 10 % noise",
        ("noise", "drift", "steps", "uncorrected", "corrected", "oracle floor", "final beta"),
    )
    results = []
    for distribution in ("uniform", "lognormal"):
        for drift_name, drift in drifts.items():
            stats, oracle = run_scenario(model, args, distribution, drift)
            table.add(
                "U(0.9, 1.1)" if distribution == "uniform" else "lognormal sd 10 %", drift_name,
                f"{stats.num_steps:,}", f"{stats.mape_uncorrected:.2%}", f"{stats.mape_corrected:.2%}",
                f"{oracle:.2%}", f"{stats.beta:.3f}",
            )
            results.append({
                "distribution": distribution, "drift": drift_name, "num_steps": stats.num_steps,
                "mape_uncorrected": stats.mape_uncorrected, "mape_corrected": stats.mape_corrected,
                "mape_oracle": oracle, "beta": stats.beta,
            })
    console = make_console()
    table.print(console)
    for result in results:
        if result["distribution"] == "uniform":
            corrected = float(result["mape_corrected"])  # type: ignore[arg-type]
            console.print(target_line(
                f"corrected MAPE, uniform 10 % noise, drift {result['drift']}", f"{corrected:.2%}",
                f"<= {TARGET_MAPE:.0%}", corrected <= TARGET_MAPE,
            ), markup=False)
    if args.json is not None:
        dump_json(args.json, {"profile": PROFILE, "noise": NOISE, "results": results})


if __name__ == "__main__":
    main()
