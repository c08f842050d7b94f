"""Tests for semsched/calibrate/fidelity.py (and, in the last test, semsched/calibrate/replay.py).

Everything but the last test runs without an engine: the trace slice and its length scaling, the engine requests,
the engine settings taken from a profile, the simulated side, and the command line's input checks. The last test
replays a small slice through real vLLM under both default policies, profiling the engine first, and checks the
structure and that every request got exactly its tokens; it never asserts an error or a timing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.calibrate import fidelity
from semsched.calibrate.fidelity import (
    FidelityConfig,
    engine_settings,
    load_slice,
    profile_mismatches,
    read_model_facts,
    replay_requests,
    saturation_rate,
    scale_lengths,
    scheduler_config,
    sim_latencies,
    simulate,
    warmup_requests,
)
from semsched.calibrate.fidelity_report import write_report
from semsched.calibrate.profiling import FIRST_PROMPT_TOKEN_ID, EngineSettings
from semsched.calibrate.replay import StepRecord
from semsched.cli import main
from semsched.latency import EngineOverheads, ProfileInfo, load_profile, load_profile_info
from semsched.latency.batch import BatchLatencyModel
from semsched.sim.speed import SpeedTrace
from semsched.workloads import DEFAULT_TIERS, Workload
from tests.calibrate.fidelity_factories import BATCH, model_dir, profile_info, small_workload, write_trace


# ---- the slice ------------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 20_000), st.integers(1, 20_000)), min_size=1, max_size=30),
    max_model_len=st.integers(2, 8192),
)
def test_scaled_lengths_fit_the_context_and_never_grow(lengths: list[tuple[int, int]], max_model_len: int) -> None:
    prompts, outputs = (np.array(column) for column in zip(*lengths, strict=True))
    workload = Workload.untiered("w", np.arange(len(lengths), dtype=float), prompts, outputs)
    scaled, scale = scale_lengths(workload, max_model_len)
    assert 0 < scale <= 1
    assert np.all(scaled.prompt_tokens >= 1) and np.all(scaled.output_tokens >= 1)
    assert np.all(scaled.prompt_tokens + scaled.output_tokens <= max_model_len)
    assert np.all(scaled.prompt_tokens <= prompts) and np.all(scaled.output_tokens <= outputs)


def test_lengths_that_fit_are_unchanged_and_the_longest_request_sets_the_scale() -> None:
    workload = Workload.untiered("w", [0.0, 1.0], [100, 3000], [50, 1000])
    same, scale = scale_lengths(workload, 4096)
    assert (
        scale == 1.0 and same.prompt_tokens.tolist() == [100, 3000] and same.output_tokens.tolist() == [50, 1000]
    )
    scaled, scale = scale_lengths(workload, 2000)
    assert scale == pytest.approx(0.5)
    assert scaled.prompt_tokens.tolist() == [50, 1500] and scaled.output_tokens.tolist() == [25, 500]


def test_scale_lengths_rejects_a_context_below_two_tokens() -> None:
    with pytest.raises(ValueError, match="max_model_len"):
        scale_lengths(Workload.untiered("w", [0.0], [5], [5]), 1)


def test_load_slice_takes_the_trace_head_scaled_with_seeded_tiers(tmp_path: Path) -> None:
    rows = [(i * 0.5, 1000 + 10 * i, 200 + i) for i in range(40)]
    trace = write_trace(tmp_path / "trace.csv", rows)
    workload, scale = load_slice(trace, 30, max_model_len=600, seed=3)
    assert len(workload) == 30
    assert workload.arrival_time_s.tolist() == pytest.approx([i * 0.5 for i in range(30)])
    assert scale == pytest.approx(600 / (1290 + 229))
    assert np.all(workload.prompt_tokens + workload.output_tokens <= 600)
    assert {spec.name for spec in workload.tiers} == {spec.name for spec in DEFAULT_TIERS}
    again, _ = load_slice(trace, 30, max_model_len=600, seed=3)
    other, _ = load_slice(trace, 30, max_model_len=600, seed=4)
    assert again.priority.tolist() == workload.priority.tolist()
    assert other.priority.tolist() != workload.priority.tolist()
    assert len(set(workload.priority.tolist())) > 1  # priorities differ, so priority policies have work to do


@pytest.mark.parametrize(("count", "message"), [(1, "num_requests: must be an integer >= 2"), (50, "only 40")])
def test_load_slice_names_a_bad_request_count(tmp_path: Path, count: int, message: str) -> None:
    trace = write_trace(tmp_path / "trace.csv", [(i * 0.5, 100, 10) for i in range(40)])
    with pytest.raises(ValueError, match=message):
        load_slice(trace, count, max_model_len=512, seed=0)


def test_replay_requests_mirror_the_workload_with_seeded_random_prompts() -> None:
    workload = small_workload()
    requests = replay_requests(workload, vocab_size=500, seed=7)
    assert [r.request_id for r in requests] == [r.request_id for r in workload.to_requests()]
    for request, sim in zip(requests, workload.to_requests(), strict=True):
        assert len(request.prompt_token_ids) == sim.prompt_tokens
        assert request.output_tokens == sim.output_tokens
        assert (request.priority, request.tier, request.arrival_s) == (sim.priority, sim.tier, sim.arrival_time_s)
        assert all(FIRST_PROMPT_TOKEN_ID <= token < 500 for token in request.prompt_token_ids)
    assert replay_requests(workload, vocab_size=500, seed=7) == requests
    assert replay_requests(workload, vocab_size=500, seed=8) != requests
    with pytest.raises(ValueError, match="vocab_size"):
        replay_requests(workload, vocab_size=FIRST_PROMPT_TOKEN_ID, seed=0)


def test_warmup_fills_one_batch_with_prompts_that_fit() -> None:
    settings = EngineSettings(model="m", max_model_len=600, max_num_seqs=8, max_num_batched_tokens=512)
    warmup = warmup_requests(settings, vocab_size=1000, seed=0)
    assert len(warmup) == 8 and len({r.request_id for r in warmup}) == 8
    assert all(r.request_id.startswith("warmup-") for r in warmup)
    assert max(len(r.prompt_token_ids) for r in warmup) == 600 - 16
    assert all(len(r.prompt_token_ids) + r.output_tokens <= 600 for r in warmup)


def test_model_facts_come_from_config_json(tmp_path: Path) -> None:
    facts = read_model_facts(model_dir(tmp_path, max_position_embeddings=2048))
    assert (facts.vocab_size, facts.max_position_embeddings) == (32000, 2048)
    nested = tmp_path / "nested"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 999}}), encoding="utf-8")
    assert read_model_facts(nested).vocab_size == 999
    with pytest.raises(ValueError, match="model: cannot read"):
        read_model_facts(tmp_path / "missing")


# ---- engine and profile ---------------------------------------------------------------------------------------
def test_engine_settings_take_the_profiled_engine_limits(tmp_path: Path) -> None:
    model = str(model_dir(tmp_path, max_position_embeddings=8192))
    settings = engine_settings(model, profile_info())
    assert (settings.max_model_len, settings.max_num_seqs, settings.max_num_batched_tokens) == (2048, 16, 512)
    assert (settings.block_size, settings.kv_blocks, settings.dtype) == (32, 1024, "bfloat16")
    longer = engine_settings(model, profile_info(), max_model_len=4096)
    assert longer.max_model_len == 4096 and longer.kv_blocks >= 4096 // 32
    default = engine_settings(model, None)
    assert default.max_model_len == fidelity.DEFAULT_MAX_MODEL_LEN  # the model's 8192, capped


def test_without_a_profile_the_context_is_the_models_when_shorter(tmp_path: Path) -> None:
    settings = engine_settings(str(model_dir(tmp_path, max_position_embeddings=1024)), None)
    assert (settings.max_model_len, settings.max_num_seqs, settings.max_num_batched_tokens) == (1024, 16, 512)


def test_profile_mismatches_name_what_differs(tmp_path: Path) -> None:
    settings = EngineSettings(model=str(tmp_path / "tiny"), max_model_len=2048, max_num_seqs=8)
    notes = profile_mismatches(profile_info(), settings)
    assert any("max_num_seqs=16" in note for note in notes)
    assert not any("model" in note and "measured model" in note for note in notes)
    assert profile_mismatches(ProfileInfo(BatchLatencyModel(BATCH), "x"), settings)[0].startswith("profile")


def test_scheduler_config_matches_the_engine_without_watermark_or_swap(tiny_model_dir: Path) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

    from semsched.vllm.harness import HarnessConfig, SchedulerHarness

    settings = EngineSettings(model=str(tiny_model_dir), max_model_len=512, max_num_seqs=8,
                              max_num_batched_tokens=256)
    config = scheduler_config(settings)
    engine = SchedulerHarness(VllmScheduler, tiny_model_dir, HarnessConfig(
        num_blocks=settings.kv_blocks, block_size=settings.block_size, max_num_seqs=8, max_num_batched_tokens=256,
        max_model_len=512)).scheduler
    assert (config.max_num_batched_tokens, config.max_num_seqs, config.block_size) == (256, 8, settings.block_size)
    assert config.num_gpu_blocks == engine.kv_cache_manager.block_pool.get_num_free_blocks()  # usable blocks
    assert config.reserve_full_prompt == engine.scheduler_reserve_full_isl
    assert (config.watermark, config.num_cpu_blocks) == (0.0, 0)


def test_fidelity_config_validates_before_any_engine_starts() -> None:
    settings = EngineSettings(model="m")
    with pytest.raises(ValueError, match="rate"):
        FidelityConfig(settings, Path("t.csv"), rate_per_s=0.0)
    with pytest.raises(ValueError, match="threads"):
        FidelityConfig(settings, Path("t.csv"), threads=0)
    for load in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="load"):
            FidelityConfig(settings, Path("t.csv"), load=load)
    with pytest.raises(ValueError):
        FidelityConfig(settings, Path("t.csv"), policies=("no-such-policy",))
    for repeats in (0, 21, True, 2.0):
        with pytest.raises(ValueError, match="repeats"):
            FidelityConfig(settings, Path("t.csv"), repeats=repeats)  # type: ignore[arg-type]


def test_replays_alternate_between_policies_round_by_round() -> None:
    order = fidelity.replay_order(("a", "b", "c"), 3)
    assert order == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert fidelity.replay_order(("a",), 2) == [["a"], ["a"]]


@pytest.mark.parametrize("repeats", [1, 2, 3, 7, 20])
def test_the_profile_is_split_into_one_part_before_and_one_after_each_round(repeats: int) -> None:
    rounds = fidelity.profile_rounds(repeats)
    first, rest = rounds[0], rounds[1:]
    assert len(rounds) == repeats + 1 and min(rounds) >= 1 and len(set(rest)) == 1
    assert first >= fidelity.FIRST_PART_ROUNDS and first >= rest[0]  # the part that sets the rate is the longest
    shared = rest[0] * len(rounds)  # PROFILE_REPEATS shared out evenly, in the fewest rounds that reach it
    assert shared >= fidelity.PROFILE_REPEATS > shared - len(rounds)


def test_the_fidelity_grid_adds_small_batches_and_mid_length_prefills() -> None:
    from semsched.calibrate.profiling import make_grid

    settings = EngineSettings(model="m", max_model_len=2048)
    grid, quick = fidelity.profile_grid(settings, repeats=2), make_grid("quick", settings)
    assert grid.repeats == 2
    assert set(quick.decode_batch_sizes) < set(grid.decode_batch_sizes)
    assert {128, 384, 768} <= set(grid.prefill_tokens) and set(quick.prefill_tokens) <= set(grid.prefill_tokens)


def test_the_median_replay_is_the_one_with_the_median_mean_e2e() -> None:
    from tests.calibrate.fidelity_factories import replay_result

    workload = small_workload()
    results = [replay_result(workload, slowdown=s) for s in (1.5, 0.9, 1.2, 2.0)]
    assert fidelity.median_replay(results) == 2  # lower median of four
    assert fidelity.median_replay(results[:3]) == 2
    with pytest.raises(ValueError, match="one policy"):
        fidelity.compare_policy(
            workload, [results[0], replay_result(workload, "sjf")], scheduler_config(EngineSettings(model="m")),
            profile_info(), "step",
        )  # fmt: skip


# ---- the simulated side ---------------------------------------------------------------------------------------
def test_simulate_finishes_every_request_and_saturation_is_positive() -> None:
    workload = small_workload()
    config = scheduler_config(EngineSettings(model="m", max_model_len=1024))
    outcome = simulate(workload, "priority-preempt", config, BatchLatencyModel(BATCH))
    assert all(r.finish_time_s is not None for r in outcome.requests) and outcome.num_steps > 0
    rate = saturation_rate(workload, config, BatchLatencyModel(BATCH))
    assert rate > 0
    assert saturation_rate(workload, config, load_profile("a100-qwen1.5-4b")) > 0


def test_the_simulation_charges_new_batch_sizes_unless_the_replay_warmed_them() -> None:
    workload = small_workload()
    config = scheduler_config(EngineSettings(model="m", max_model_len=1024))
    latency = BatchLatencyModel(BATCH)

    def mean_e2e(new_shape_s: float = 0.0, warm_shapes: Iterable[int] = ()) -> float:
        overheads = EngineOverheads(new_shape_s=new_shape_s)
        outcome = simulate(workload, "fcfs", config, latency, overheads, warm_shapes=warm_shapes)
        requests = outcome.requests
        return float(np.mean([(r.finish_time_s or 0.0) - r.arrival_time_s for r in requests]))

    plain = mean_e2e()
    assert mean_e2e(new_shape_s=0.05) > plain
    assert mean_e2e(new_shape_s=0.05, warm_shapes=range(1, config.max_num_batched_tokens + 1)) == plain


def test_the_onednn_cache_is_sized_for_every_batch_size_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = EngineSettings(model="m", max_num_batched_tokens=256)
    monkeypatch.delenv(fidelity.ONEDNN_CACHE_ENV, raising=False)
    assert fidelity.shape_cache_capacity(settings) == str(fidelity.SHAPE_CACHE_PER_BUDGET_TOKEN * 256)
    monkeypatch.setenv(fidelity.ONEDNN_CACHE_ENV, "100")
    assert fidelity.shape_cache_capacity(settings) == "100"



@pytest.mark.parametrize("load", [0.25, 0.5])
def test_the_slice_replays_at_the_given_fraction_of_the_saturation_rate(tmp_path: Path, load: float) -> None:
    trace = write_trace(tmp_path / "t.csv", [(i * 0.5, 100 + 7 * i, 10 + i) for i in range(20)])
    settings = EngineSettings(model=str(model_dir(tmp_path)), max_model_len=1024)
    config = FidelityConfig(settings, trace, num_requests=20, load=load)
    prepared = fidelity.prepare_slice(config, profile_info())
    assert prepared.rate_per_s == pytest.approx(load * prepared.saturation_rate_per_s)
    assert prepared.workload.mean_rate() == pytest.approx(prepared.rate_per_s)

# ---- the command line -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--requests", "1"], "--requests"),
        (["--rate", "-1"], "--rate"),
        (["--threads", "0"], "--threads"),
        (["--repeats", "0"], "--repeats"),
        (["--max-model-len", "1"], "--max-model-len"),
        (["--policies", "no-such-policy"], "no-such-policy"),
        (["--model", "/no/such/dir"], "--model"),
    ],
)
def test_cli_rejects_bad_input_before_starting_an_engine(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fidelity", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and field in err and len(err.strip().splitlines()) <= 2


# ---- real vLLM ------------------------------------------------------------------------------------------------
@pytest.mark.vllm
@pytest.mark.slow
def test_replay_and_simulation_of_a_small_slice_on_real_vllm(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from semsched.workloads import find_data_file

    monkeypatch.delenv(fidelity.ONEDNN_CACHE_ENV, raising=False)  # the run sets it for this process

    settings = EngineSettings(model=str(tiny_model_dir), max_model_len=512)
    config = FidelityConfig(settings, find_data_file(fidelity.DEFAULT_TRACE_FILE), num_requests=40, repeats=2)
    report = fidelity.run_fidelity(config, profile_path=tmp_path / "profile.yaml")
    assert (tmp_path / "profile.yaml").is_file()
    profile = load_profile_info(str(tmp_path / "profile.yaml"))
    assert profile.fit["parts"] == 3 and profile.fit["rounds"] == sum(fidelity.profile_rounds(2))
    assert profile.overheads.arrival_s > 0  # the request intake was timed
    assert "idle_wakeup_s" in yaml.safe_load(Path(profile.origin).read_text())["overheads"]  # waking was timed
    assert report.meta["onednn_primitive_cache_capacity"] == str(16 * settings.max_num_batched_tokens)
    workload, _ = fidelity.load_slice(config.trace, 40, max_model_len=512, seed=config.seed)
    full_capacity = fidelity.saturation_rate(workload, fidelity.scheduler_config(settings), profile.model)
    assert report.meta["full_profile_saturation_rate_per_s"] == pytest.approx(full_capacity)
    sizes = set(range(1, min(settings.max_num_batched_tokens, settings.max_model_len - 1) + 1))
    assert [p.policy for p in report.policies] == ["fcfs", "priority-preempt"]
    for policy in report.policies:
        wanted = {r.request_id: r.output_tokens or 0 for r in policy.sim_requests}
        assert len(policy.all_replays) == 2 and policy.real in policy.all_replays
        for replay in policy.all_replays:
            assert replay.policy == policy.policy and len(replay.requests) == len(wanted) == 40
            assert sizes <= set(replay.warm_shapes)  # every batch size ran before the clock started
            for record in replay.requests:
                assert record.finish_s is not None and record.first_token_s is not None
                assert record.num_output_tokens == wanted[record.request_id]
                assert record.arrival_s <= record.first_token_s <= record.finish_s
        assert all(len(m.real_repeats_s) == 2 for m in policy.metrics)
        assert all(r.finish_time_s is not None for r in policy.sim_requests)
        assert policy.num_complete == 40
        assert [m.metric for m in policy.metrics] == ["ttft_mean", "ttft_p90", "e2e_mean", "e2e_p90"]
        assert policy.analysis.real_steps == len(policy.real.steps) > 0
        emitters = sum(s.num_decode + len(s.prefill) for s in policy.real.steps)
        assert emitters >= sum(wanted.values())  # every token came out of a recorded step
    paths = write_report(report, tmp_path / "out")
    assert json.loads(paths[0].read_text())["meta"]["num_requests"] == 40


# ---- the simulator on the machine's measured speed --------------------------------------------------------------
Replay = tuple[list[StepRecord], dict[str, list[float]]]


def _replay_at(speed: float, workload: Workload, profile: ProfileInfo) -> Replay:
    """What a replay would record on a machine running ``speed`` x the profile's step times throughout: the
    simulator's latencies at that speed, and settled decode steps (4 requests) that took ``speed`` x their
    profiled time, one every 50 ms over the run."""
    config = scheduler_config(EngineSettings(model="m", max_model_len=1024))
    outcome = simulate(
        workload, "fcfs", config, profile.model, overheads=profile.overheads, speed=SpeedTrace(1.0, (speed,))
    )
    end_s = max(r.finish_time_s or 0.0 for r in outcome.requests)
    predicted = profile.model.step_time_s([], 4, 800)
    steps = [
        StepRecord(0.05 * i, speed * predicted, 0.0, speed * predicted, 0.0, 0.0, 0.0, (), 4, 800, 0, 0)
        for i in range(int(end_s / 0.05) + 1)
    ]
    return steps, sim_latencies(outcome.requests)


def test_on_the_machines_measured_speed_the_simulator_matches_a_uniformly_slower_machine() -> None:
    workload, profile = small_workload(20), profile_info()
    config = scheduler_config(EngineSettings(model="m", max_model_len=1024))
    slow, fast = _replay_at(1.3, workload, profile), _replay_at(0.8, workload, profile)
    given = fidelity.compare_given_speed(workload, "fcfs", [slow, fast], config, profile, "step")
    assert [s.mean if s else None for s in given.speeds] == pytest.approx([1.3, 0.8])
    for run in given.per_replay:
        assert all(abs(m.error) < 1e-9 for m in run)  # each replay's speed taken out exactly
    ttft = given.metric("ttft_mean")
    assert ttft.real_repeats_s == pytest.approx((np.mean(slow[1]["ttft"]), np.mean(fast[1]["ttft"])))
    assert ttft.real_s == pytest.approx(np.mean(ttft.real_repeats_s))
    assert ttft.error == pytest.approx(0.0, abs=1e-9)
    # the plain simulation on the profile's speed is off for each of them
    plain = sim_latencies(simulate(workload, "fcfs", config, profile.model, overheads=profile.overheads).requests)
    assert np.mean(plain["e2e"]) < 0.9 * np.mean(slow[1]["e2e"]) and np.mean(plain["e2e"]) > 1.1 * np.mean(
        fast[1]["e2e"]
    )


def test_a_replay_without_settled_decode_steps_is_simulated_at_the_profiles_speed() -> None:
    workload, profile = small_workload(8), profile_info()
    config = scheduler_config(EngineSettings(model="m", max_model_len=1024))
    steps, real = _replay_at(1.5, workload, profile)
    prefills = [dataclasses.replace(s, prefill=((64, 0),)) for s in steps]
    given = fidelity.compare_given_speed(workload, "fcfs", [(prefills, real)], config, profile, "step")
    plain = sim_latencies(simulate(workload, "fcfs", config, profile.model, overheads=profile.overheads).requests)
    assert given.speeds == (None,)
    assert given.metric("e2e_mean").sim_s == pytest.approx(np.mean(plain["e2e"]))
