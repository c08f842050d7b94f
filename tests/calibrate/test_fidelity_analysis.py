"""Tests for semsched/calibrate/fidelity_analysis.py: the split of real engine time against a profile, on synthetic
steps (no engine)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from semsched.calibrate.fidelity_analysis import (
    ClassScaledLatency,
    ScaledLatency,
    batch_change_fits,
    class_factors,
    engine_time_ratio,
    error_sources,
    machine_speed,
    profile_timing,
    profiled_time_s,
    speed_drift,
    step_class_fits,
    window_ratios,
)
from semsched.calibrate.replay import ReplayResult
from semsched.latency import EngineOverheads, LatencyModel, load_profile
from semsched.latency.batch import BatchLatencyModel
from tests.calibrate.fidelity_factories import BATCH, SCHEDULE_S, UPDATE_S, profile_info, step

PER_STEP_SOURCES = {
    "step-time fit",
    "scheduler and output bookkeeping",
    "output processing (detokenisation)",
    "engine loop between steps",
}


def result_of(*steps: object) -> ReplayResult:
    return ReplayResult("fcfs", [], list(steps), 0.0, 0.0, 1.0, "0.32.0", 64)  # type: ignore[arg-type]


def test_profiled_time_covers_what_each_timing_measures() -> None:
    record = step((), 3, 900, model_s=0.004)
    assert profiled_time_s(record, "execute") == pytest.approx(0.004)
    assert profiled_time_s(record, "iteration") == pytest.approx(0.004 + SCHEDULE_S + UPDATE_S)
    assert profiled_time_s(record, "step") == pytest.approx(record.duration_s)
    assert profiled_time_s(record, "cycle") == pytest.approx(record.duration_s + record.gap_before_s)


@pytest.mark.parametrize("timing", ["execute", "iteration", "step", "cycle"])
def test_per_step_sources_add_up_to_real_minus_predicted_engine_time(timing: str) -> None:
    steps = [step(((400, 0),), 2, 900), step((), 1, 300), step((), 8, 4000, model_s=0.01, gap_s=0.0)]
    latency = BatchLatencyModel(BATCH)
    sources = error_sources(result_of(*steps), latency, timing)
    total = sum(s.engine_s for s in sources if s.name in PER_STEP_SOURCES)
    real = sum(profiled_time_s(s, "cycle") for s in steps)
    predicted = sum(latency.step_time_s(list(s.prefill), s.num_decode, s.decode_context_tokens) for s in steps)
    assert total == pytest.approx(real - predicted)
    assert [abs(s.engine_s) for s in sources] == sorted((abs(s.engine_s) for s in sources), reverse=True)


def test_arrival_sources_count_only_what_exceeds_the_profiled_intake() -> None:
    from semsched.calibrate.replay import RequestRecord

    steps = [step((), 1, 100, gap_s=0.003) for _ in range(4)]
    requests = [RequestRecord(str(i), 0.0, added_s=0.0, loop_delay_s=0.002, found_idle=i == 0) for i in range(4)]
    result = ReplayResult("fcfs", requests, steps, 0.0, 0.0, 1.0, "0.32.0", 64)
    latency = BatchLatencyModel(BATCH)
    plain = {s.name: s for s in error_sources(result, latency, "step")}
    overheads = EngineOverheads(arrival_s=0.001, idle_wakeup_s=0.0005)
    charged = {s.name: s for s in error_sources(result, latency, "step", overheads)}
    loop, idle = "engine loop between steps", "arrival handling on an idle engine"
    assert charged[loop].engine_s == pytest.approx(plain[loop].engine_s - 3 * 0.001)  # three arrived while busy
    # one found the engine idle: its intake and its wake-up are charged
    assert charged[idle].engine_s == pytest.approx(plain[idle].engine_s - 0.0015)
    assert "not in the profile" in plain[loop].note and "1.00 ms x 3 arrivals" in charged[loop].note
    assert "not in the profile" in plain[idle].note and "0.50 ms wake-up x 1 arrivals" in charged[idle].note


def test_step_classes_split_prefill_and_decode_batch_sizes() -> None:
    steps = [step(((64, 0),), 1, 10), step((), 1, 100), step((), 2, 200), step((), 5, 500), step((), 12, 1200)]
    classes = {c.name: c for c in step_class_fits(steps, BatchLatencyModel(BATCH), "execute")}
    sizes = {name: c.num_steps for name, c in classes.items()}
    assert sizes == {"with prefill": 1, "1-2 decodes": 2, "3-8 decodes": 1, "9+ decodes": 1}
    assert all(c.bias_s == pytest.approx(0.0, abs=1e-12) for c in classes.values())  # model time is BATCH's


def test_decode_steps_right_after_a_batch_change_are_told_apart() -> None:
    slow = BatchLatencyModel(BATCH).step_time_s([], 2, 200) * 1.5
    steps = [
        step(((64, 0),), 1, 100),  # a prefill beside one decode
        step((), 2, 200, model_s=slow),  # the prefilled request joined: changed
        step((), 2, 202),
        step((), 2, 204),
        step((), 1, 103, model_s=slow),  # one left: changed
        step((), 1, 104),
    ]
    fits = {c.name: c for c in batch_change_fits(steps, BatchLatencyModel(BATCH), "execute")}
    changed, steady = fits["decode-only right after a batch change"], fits["other decode-only"]
    assert (changed.num_steps, steady.num_steps) == (2, 3)
    assert changed.real_ms > changed.predicted_ms and steady.bias_s == pytest.approx(0.0, abs=1e-12)


def test_the_fit_source_names_the_worst_step_class() -> None:
    steps = [step((), 1, 100, model_s=0.01)] * 5 + [step((), 12, 1200)] * 5
    fit_source = next(s for s in error_sources(result_of(*steps), BatchLatencyModel(BATCH), "execute"))
    assert fit_source.name == "step-time fit" and "1-2 decodes" in fit_source.note


def test_prefix_cache_hits_count_as_work_the_simulator_adds() -> None:
    steps = [step(((100, 400),), 0, 0, cached=400), step((), 1, 500)]
    sources = error_sources(result_of(*steps), BatchLatencyModel(BATCH), "cycle")
    source = next(s for s in sources if s.name == "prefix-cache hits")
    assert source.engine_s == pytest.approx(-400 * BATCH.c_p)
    assert "400" in source.note


def test_engine_time_ratio_is_real_cycles_over_what_the_profile_charges() -> None:
    steps = [step((), 2, 100), step(((64, 0),), 4, 400)]
    latency = BatchLatencyModel(BATCH)
    predicted = sum(latency.step_time_s(list(s.prefill), s.num_decode, s.decode_context_tokens) for s in steps)
    expected = sum(profiled_time_s(s, "cycle") for s in steps) / predicted
    assert engine_time_ratio(steps, latency) == pytest.approx(expected)
    assert engine_time_ratio([], latency) == 1.0


@pytest.mark.parametrize("base", [BatchLatencyModel(BATCH), load_profile("a100-qwen1.5-4b")])
def test_a_scaled_model_keeps_the_latency_model_promises(base: LatencyModel) -> None:
    scaled = ScaledLatency(base, 1.05)
    assert isinstance(scaled, LatencyModel)
    assert scaled.step_time_s([], 0, 0) == 0.0
    assert scaled.step_time_s([(100, 20)], 3, 900) == pytest.approx(1.05 * base.step_time_s([(100, 20)], 3, 900))
    series = scaled.decode_times_s(4, 1000, 5)
    assert all(series[i] == scaled.step_time_s([], 4, 1000 + 4 * i) for i in range(5))  # bit for bit
    assert scaled.swap_time_s(100) == pytest.approx(1.05 * base.swap_time_s(100))


def test_profile_timing_comes_from_the_fit_section_and_defaults_to_cycle() -> None:
    assert profile_timing(profile_info("execute")) == "execute"
    assert profile_timing(profile_info("iteration")) == "iteration"
    assert profile_timing(profile_info("step")) == "step"
    assert profile_timing(profile_info("something else")) == "cycle"


def test_speed_drift_compares_the_probes_around_a_replay_with_the_profiles() -> None:
    result = replace(result_of(step((), 1, 10)), probe_before_s=0.0021, probe_after_s=0.0023)
    assert speed_drift(result, profile_info()) == pytest.approx(0.0022 / 0.002)
    assert speed_drift(replace(result, probe_after_s=None), profile_info()) == pytest.approx(1.05)
    assert speed_drift(result_of(step((), 1, 10)), profile_info()) is None  # no probe around the replay
    no_probe = replace(profile_info(), fit={"timing": "step"})
    assert speed_drift(result, no_probe) is None


def test_class_factors_and_the_class_scaled_model_match_each_class() -> None:
    steps = [step(((64, 0),), 2, 100, model_s=0.02), step((), 1, 100), step((), 12, 1200)]
    latency = BatchLatencyModel(BATCH)
    factors = class_factors(steps, latency)
    assert set(factors) == {"with prefill", "1-2 decodes", "9+ decodes"}
    corrected = ClassScaledLatency(latency, factors)
    for record in steps:  # each class's real cycle time, exactly (one step per class here)
        predicted = corrected.step_time_s(list(record.prefill), record.num_decode, record.decode_context_tokens)
        assert predicted == pytest.approx(profiled_time_s(record, "cycle"))
    series = corrected.decode_times_s(12, 1200, 4)
    assert all(series[i] == corrected.step_time_s([], 12, 1200 + 12 * i) for i in range(4))  # bit for bit
    assert corrected.decode_times_s(5, 500, 2).tolist() == latency.decode_times_s(5, 500, 2).tolist()  # factor 1


def test_window_ratios_compare_busy_windows_only() -> None:
    latency = BatchLatencyModel(BATCH)
    fast = [replace(step((), 4, 400), start_s=0.01 * i) for i in range(300)]  # 3 s of steps, as predicted
    slow = [replace(step((), 4, 400, model_s=0.006), start_s=3.0 + 0.02 * i) for i in range(150)]
    lone = [replace(step((), 4, 400), start_s=7.0)]  # a window with one step is not busy
    ratios = window_ratios(fast + slow + lone, latency, window_s=3.0)
    assert len(ratios) == 2
    expected = [profiled_time_s(s, "cycle") / latency.step_time_s([], 4, 400) for s in (fast[0], slow[0])]
    assert ratios == pytest.approx(expected)


def test_machine_speed_is_measured_on_settled_decode_steps_per_window() -> None:
    latency = BatchLatencyModel(BATCH)
    predicted = latency.step_time_s([], 4, 400)

    def steady(start: float, factor: float) -> object:
        record = step((), 4, 400)
        return replace(record, start_s=start, duration_s=factor * predicted)

    window_0 = [steady(0.1 * i, 1.0) for i in range(20)]  # as profiled
    # window 1: the first decode step after a prefill (a batch change) and the prefill itself do not count
    window_1 = [replace(step(((300, 0),), 4, 400), start_s=3.0, duration_s=1.0)]
    window_1 += [steady(3.1, 9.0)] + [steady(3.2 + 0.1 * i, 1.4) for i in range(20)]
    window_2 = [steady(6.5, 3.0)] * 2  # too few steps: takes a neighbour's factor
    window_3 = [steady(9.0 + 0.05 * i, 0.7) for i in range(10)] + [steady(9.6, 0.8)] * 10
    trace = machine_speed(window_0 + window_1 + window_2 + window_3, latency, "step", window_s=3.0, min_steps=5)
    assert trace is not None and trace.window_s == 3.0
    assert trace.factors == pytest.approx((1.0, 1.4, 1.4, 0.75))  # window 3: the time-weighted mean
    # only the part of a step the profile's timing covers is compared: these steps' model time is as profiled
    by_model = machine_speed(window_0 + window_1, latency, "execute", window_s=3.0)
    assert by_model is not None and by_model.factors == pytest.approx((1.0, 1.0))


def test_machine_speed_is_none_without_settled_decode_steps() -> None:
    latency = BatchLatencyModel(BATCH)
    prefills = [replace(step(((100, 0),), 2, 200), start_s=0.1 * i) for i in range(30)]
    assert machine_speed(prefills, latency, "step") is None
    assert machine_speed([], latency, "step") is None
