"""Factories shared by the fidelity tests: synthetic traces, model directories, workloads, replay steps, replay
results and profiles (no engine)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from semsched.calibrate.fidelity import scheduler_config, simulate
from semsched.calibrate.fidelity_analysis import PROBE_FIT_KEY
from semsched.calibrate.profiling import EngineSettings
from semsched.calibrate.replay import ReplayResult, RequestRecord, StepRecord
from semsched.latency import ProfileInfo
from semsched.latency.batch import BatchConfig, BatchLatencyModel
from semsched.latency.profiles import FitValue, ProfiledEngine
from semsched.workloads import DEFAULT_TIERS, Workload, assign_tiers

BATCH = BatchConfig(t_c=2e-3, a_p=0.0, b_p=1e-8, c_p=1e-5, a_d=5e-8, b_d=3e-4)
"""A CPU-like step-time model for synthetic steps."""
SCHEDULE_S, UPDATE_S, OUTPUT_S, GAP_S = 3e-4, 1e-4, 2e-4, 5e-5
"""Per-step overheads of a synthetic step unless a test gives others."""


def write_trace(path: Path, rows: Sequence[tuple[float, int, int]]) -> Path:
    """An Azure-format CSV: (seconds after 18:15:00, prompt tokens, output tokens) per row."""
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"2023-11-16 18:15:{seconds:010.7f},{prompt},{output}" for seconds, prompt, output in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def model_dir(tmp_path: Path, **config: object) -> Path:
    """A directory with only a config.json (enough for everything but starting an engine)."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"vocab_size": 32000, **config}), encoding="utf-8")
    return path


def small_workload(n: int = 12, seed: int = 0) -> Workload:
    """``n`` tiered requests, Poisson-ish arrivals, prompts 20-600 and outputs 5-60 tokens."""
    rng = np.random.default_rng(seed)
    workload = Workload.untiered(
        "test", np.cumsum(rng.exponential(0.2, n)), rng.integers(20, 600, n), rng.integers(5, 60, n)
    )
    return assign_tiers(workload, DEFAULT_TIERS, np.random.default_rng(seed))


def step(
    prefill: tuple[tuple[int, int], ...] = (),
    num_decode: int = 0,
    context: int = 0,
    *,
    model_s: float | None = None,
    gap_s: float = GAP_S,
    cached: int = 0,
) -> StepRecord:
    """A real step whose model time follows :data:`BATCH` unless given, with the default overheads."""
    if model_s is None:
        model_s = BatchLatencyModel(BATCH).step_time_s(list(prefill), num_decode, context)
    duration = SCHEDULE_S + model_s + UPDATE_S + OUTPUT_S
    return StepRecord(
        0.0, duration, SCHEDULE_S, model_s, UPDATE_S, OUTPUT_S, gap_s, prefill, num_decode, context, 0, cached
    )


def replay_result(workload: Workload, policy: str = "fcfs", slowdown: float = 1.2) -> ReplayResult:
    """A replay whose latencies are the simulator's (:data:`BATCH`) stretched by ``slowdown``, with a fixed
    set of synthetic steps."""
    config = scheduler_config(EngineSettings(model="m", max_model_len=1024))
    records = []
    for request in simulate(workload, policy, config, BatchLatencyModel(BATCH)).requests:
        arrival, first, finish = request.arrival_time_s, request.first_token_time_s, request.finish_time_s
        assert first is not None and finish is not None
        records.append(
            RequestRecord(
                request.request_id,
                arrival,
                added_s=arrival,
                loop_delay_s=1e-4,
                found_idle=request.request_id == "0",
                first_token_s=arrival + slowdown * (first - arrival),
                finish_s=arrival + slowdown * (finish - arrival),
                num_output_tokens=request.output_tokens or 0,
            )
        )
    steps = [step(((300, 0),), 4, 1600)] + [step((), b, 500 * b) for b in (1, 2, 2, 5, 9, 12)] * 20
    return ReplayResult(
        policy, records, steps, 3.0, 0.5, 10.0, "0.32.0", 1024, probe_before_s=0.0021, probe_after_s=0.0023
    )


def profile_info(timing: str = "step") -> ProfileInfo:
    """:data:`BATCH` as a profile of a 16-sequence, 512-token-budget engine with 1,024 blocks of 32, whose
    engine-speed probe took 2 ms."""
    engine = ProfiledEngine("vllm", "0.32.0", "/models/tiny", "cpu", "bfloat16", 32, 1024, 512, 16, 2048)
    fit: dict[str, FitValue] = {"timing": timing, PROBE_FIT_KEY: 0.002}
    return ProfileInfo(BatchLatencyModel(BATCH, name="test"), "test", engine=engine, fit=fit)
