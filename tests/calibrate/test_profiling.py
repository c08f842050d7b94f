"""Tests for semsched/calibrate/profiling.py.

Most tests need no engine: the grid, the composition of vLLM-shaped scheduler outputs, the recorder, the choice of
fit samples and the whole measure-and-fit pipeline on a fake engine (semsched's own vLLM-v1-style scheduler timed
by a known batch model). One slow test profiles the tiny random-weight model on real vLLM.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.calibrate.profiling import (
    INTAKE_DECODES,
    EngineSettings,
    MeasuredStep,
    ProfileGrid,
    ProfileResult,
    ProfilingError,
    Statistic,
    StepComposition,
    StepKey,
    StepRecord,
    StepRecorder,
    default_profile_name,
    expected_chunks,
    fit_steps,
    idle_wakeup_overhead_s,
    intake_times_s,
    make_grid,
    measure_grid,
    new_shape_overhead_s,
    profile_vllm,
    repeat_spread,
    representative_steps,
    step_composition,
    wakeup_times_s,
)
from semsched.cli import main
from semsched.core.plan import StepResult
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency import PROFILE_DIR_ENV, load_profile, load_profile_info, user_profile_path
from semsched.latency.batch import BatchConfig, BatchLatencyModel, evaluate
from semsched.latency.profiles import ProfiledEngine
from semsched.policies import make_policy
from tests.support import make_request

TRUE_CONFIG = BatchConfig(t_c=3e-3, a_p=2e-9, b_p=1e-8, c_p=8e-6, a_d=1e-7, b_d=1.5e-4)
SMALL_GRID = ProfileGrid((0, 2, 5), (64, 300), (16, 200, 700), decode_steps=2, repeats=2, warmup_repeats=1)


def settings_for(**overrides: object) -> EngineSettings:
    values: dict[str, object] = {"model": "/models/tiny", "max_model_len": 1024, "max_num_seqs": 8}
    values.update(overrides)
    return EngineSettings(**values)  # type: ignore[arg-type]


# ---- vLLM-shaped scheduler outputs -------------------------------------------------------------------------
@dataclass
class FakeNewRequest:
    req_id: str
    num_computed_tokens: int


@dataclass
class FakeCachedRequests:
    req_ids: list[str] = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)


@dataclass
class FakeSchedulerOutput:
    scheduled_new_reqs: list[FakeNewRequest]
    scheduled_cached_reqs: FakeCachedRequests
    num_scheduled_tokens: dict[str, int]


@dataclass
class FakeVllmRequest:
    num_prompt_tokens: int
    num_tokens: int  # prompt + tokens generated so far


def test_composition_of_a_mixed_step() -> None:
    output = FakeSchedulerOutput(
        scheduled_new_reqs=[FakeNewRequest("new", 0)],
        scheduled_cached_reqs=FakeCachedRequests(
            ["chunked", "d1", "last-prompt-token", "recompute", "d2", "idle"], [512, 300, 99, 120, 40, 7]
        ),
        num_scheduled_tokens={
            "d1": 1,
            "chunked": 200,
            "new": 300,
            "last-prompt-token": 1,  # the 100th token of a 100-token prompt: a prefill chunk
            "recompute": 1,  # computed >= prompt but not the last token: the tail of a recompute, a prefill
            "d2": 1,
            "idle": 0,
        },
    )
    requests = {
        "new": FakeVllmRequest(1000, 1000),
        "chunked": FakeVllmRequest(712, 712),
        "d1": FakeVllmRequest(290, 301),
        "last-prompt-token": FakeVllmRequest(100, 100),
        "recompute": FakeVllmRequest(100, 130),
        "d2": FakeVllmRequest(40, 41),
        "idle": FakeVllmRequest(10, 10),
    }
    composition = step_composition(output, requests)
    assert composition == StepComposition(((200, 512), (300, 0), (1, 99), (1, 120)), 2, 340)


def test_recorder_times_execution_and_the_whole_iteration() -> None:
    wall = iter([10.0, 10.5, 12.5, 13.0])  # schedule starts, execution starts, update starts, update ends
    cpu = iter([100.0, 101.5])  # execution starts, update starts
    recorder = StepRecorder(clock=lambda: next(wall), cpu_clock=lambda: next(cpu))
    output = FakeSchedulerOutput([FakeNewRequest("a", 0)], FakeCachedRequests(), {"a": 64})
    recorder.schedule_started()
    recorder.scheduled(output, {"a": FakeVllmRequest(64, 64)})
    recorder.update_started()
    recorder.update_finished()
    assert recorder.take() == [StepRecord(StepComposition(((64, 0),), 0, 0), 2.0, 3.0, 1.5)]
    assert recorder.take() == []


def test_recorder_skips_empty_steps() -> None:
    recorder = StepRecorder(clock=itertools.count().__next__, cpu_clock=itertools.count().__next__)
    recorder.schedule_started()
    recorder.scheduled(FakeSchedulerOutput([], FakeCachedRequests(), {}), {})
    recorder.update_started()
    recorder.update_finished()
    assert recorder.take() == []


# ---- grid ------------------------------------------------------------------------------------------------------
def test_expected_chunks_follow_the_budget_left_by_decodes() -> None:
    assert expected_chunks(1000, 512, 4) == [(508, 0), (492, 508)]
    assert expected_chunks(1016, 512, 4) == [(508, 0), (508, 508)]
    assert expected_chunks(16, 512, 0) == [(16, 0)]
    with pytest.raises(ValueError, match="no prefill room"):
        expected_chunks(16, 8, 8)


def test_grid_blocks_and_step_count() -> None:
    assert SMALL_GRID.blocks() == [(0, 0), (2, 64), (2, 300), (5, 64), (5, 300)]
    assert SMALL_GRID.warmup_block() == (5, 64)
    assert SMALL_GRID.describe() == "D=0,2,5 C=64,300 P=16,200,700 decode_steps=2"
    # budget 512: P=700 needs 2 chunks; decoding blocks add 2 decode steps
    assert SMALL_GRID.steps_per_repeat(0, 512) == 1 + 1 + 2
    assert SMALL_GRID.steps_per_repeat(5, 512) == 2 + 1 + 1 + 2
    assert SMALL_GRID.num_measured_steps(512) == 2 * (4 + 4 * 6)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"decode_batch_sizes": ()}, "decode_batch_sizes: give at least one value"),
        ({"decode_batch_sizes": (-1,)}, r"decode_batch_sizes: must be an integer >= 0 \(got -1\)"),
        ({"prefill_tokens": (16, 16)}, "prefill_tokens: values must be distinct"),
        ({"decode_context_tokens": (0,)}, r"decode_context_tokens: must be an integer >= 1"),
        ({"repeats": 0}, r"repeats: must be an integer >= 1 \(got 0\)"),
        ({"decode_steps": 1.5}, "decode_steps: must be an integer"),
    ],
)
def test_bad_grids_name_the_field(kwargs: dict[str, object], pattern: str) -> None:
    values: dict[str, object] = {
        "decode_batch_sizes": (0, 1),
        "decode_context_tokens": (64,),
        "prefill_tokens": (16,),
        **kwargs,
    }
    with pytest.raises(ProfilingError, match=pattern):
        ProfileGrid(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("grid", "engine", "pattern"),
    [
        (ProfileGrid((8,), (64,), (16,)), settings_for(), r"decode_batch_sizes: at most max_num_seqs - 1 = 7"),
        (ProfileGrid((0,), (64,), (1024,)), settings_for(), r"prefill_tokens: at most max_model_len - 1 = 1023"),
        (ProfileGrid((4,), (1015,), (16,)), settings_for(), r"decode_context_tokens: 1015 .* use at most 1009"),
        (
            ProfileGrid((4,), (500,), (16,)),
            settings_for(num_gpu_blocks=40),
            r"num_gpu_blocks: .* more than the 40",
        ),
    ],
)
def test_grid_check_names_field_and_limit(grid: ProfileGrid, engine: EngineSettings, pattern: str) -> None:
    with pytest.raises(ProfilingError, match=pattern):
        grid.check(engine)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["quick", "full"]),
    max_num_seqs=st.integers(2, 64),
    budget_per_seq=st.integers(4, 64),
    max_model_len=st.integers(512, 8192),
    block_size=st.sampled_from([16, 32, 128]),
)
def test_named_grids_always_fit_their_engine(
    name: str, max_num_seqs: int, budget_per_seq: int, max_model_len: int, block_size: int
) -> None:
    engine = EngineSettings(
        model="m",
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(64, max_num_seqs * budget_per_seq),
        block_size=block_size,
    )
    grid = make_grid(name, engine)
    grid.check(engine)
    assert 0 in grid.decode_batch_sizes and max(grid.decode_batch_sizes) == max_num_seqs - 1
    assert max(grid.prefill_tokens) > min(grid.prefill_tokens)


def test_make_grid_repeats_and_unknown_name() -> None:
    assert make_grid("quick", settings_for(), repeats=5).repeats == 5
    with pytest.raises(ProfilingError, match="grid: unknown grid 'huge'"):
        make_grid("huge", settings_for())


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"max_num_seqs": 1}, r"max_num_seqs: must be an integer >= 2 \(got 1\)"),
        ({"max_num_batched_tokens": 4}, r"max_num_batched_tokens: must be an integer >= 8"),
        ({"num_gpu_blocks": 31}, r"num_gpu_blocks: must be an integer >= 32"),
        ({"dtype": "int4"}, r"dtype: expected one of"),
        ({"model": ""}, r"model:"),
    ],
)
def test_bad_engine_settings_name_the_field(kwargs: dict[str, object], pattern: str) -> None:
    with pytest.raises(ProfilingError, match=pattern):
        settings_for(**kwargs)


def test_default_kv_blocks_hold_every_sequence_at_full_length() -> None:
    assert settings_for().kv_blocks == 8 * (1024 // 32)
    assert settings_for(num_gpu_blocks=100).kv_blocks == 100


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("/models/Qwen2-0.5B-Instruct/", "qwen2-0.5b-instruct-vllm-cpu"),
        ("tiny model (copy)", "tiny-model-copy-vllm-cpu"),
        ("/", "model-vllm-cpu"),
    ],
)
def test_default_profile_name(model: str, name: str) -> None:
    assert default_profile_name(model) == name


# ---- fit samples -----------------------------------------------------------------------------------------------
def measured(key: StepKey, repeat: int, time_s: float) -> MeasuredStep:
    return MeasuredStep(key, repeat, StepRecord(StepComposition((), 1, repeat), time_s, time_s * 2, time_s))


def test_representative_steps_min_and_lower_median_keep_group_order() -> None:
    first, second = StepKey(1, 64, "decode", 0, 0), StepKey(1, 64, "decode", 0, 1)
    steps = [measured(first, 0, 5.0), measured(second, 0, 1.0), measured(first, 1, 3.0)]
    steps += [measured(second, 1, 2.0), measured(first, 2, 9.0)]
    assert [s.record.execute_s for s in representative_steps(steps, "execute", "min")] == [3.0, 1.0]
    assert [s.record.execute_s for s in representative_steps(steps, "execute", "median")] == [5.0, 1.0]
    assert [s.record.iteration_s for s in representative_steps(steps, "iteration", "min")] == [6.0, 2.0]
    means = representative_steps(steps, "iteration", "mean")
    assert [s.record.execute_s for s in means] == [pytest.approx(17 / 3), pytest.approx(1.5)]
    assert [s.record.iteration_s for s in means] == [pytest.approx(34 / 3), pytest.approx(3.0)]
    assert [s.record.composition for s in means] == [steps[0].record.composition, steps[1].record.composition]


def test_repeat_spread_is_the_median_gap_between_typical_and_fastest_repeat() -> None:
    first, second = StepKey(1, 64, "decode", 0, 0), StepKey(1, 64, "decode", 0, 1)
    steps = [measured(first, r, t) for r, t in enumerate((1.0, 3.0, 2.0))]
    steps += [measured(second, r, 2.0) for r in range(2)]
    assert repeat_spread(steps) == pytest.approx(0.5)  # median of 2/1 - 1 and 2/2 - 1


# ---- the pipeline on a fake engine ---------------------------------------------------------------------------
class CoreEngine:
    """semsched's own vLLM-v1-style scheduler as a :class:`ProfilingEngine`, each step timed by ``latency``.

    With ``cold_shapes``, the first step of every batch shape (prefill chunks and decode count) is 20 times
    slower, as a first-time kernel shape or a burst of load from another process would make it. With
    ``new_size_s``, the first step of every batch size (tokens computed) costs that much more, as vLLM's CPU
    backend's does.
    """

    def __init__(
        self,
        engine: EngineSettings,
        latency: BatchLatencyModel,
        *,
        cold_shapes: bool = False,
        new_size_s: float = 0.0,
    ) -> None:
        config = SchedulerConfig(
            max_num_batched_tokens=engine.max_num_batched_tokens,
            max_num_seqs=engine.max_num_seqs,
            block_size=engine.block_size,
            num_gpu_blocks=engine.kv_blocks,
            watermark=0.0,
        )
        self.scheduler = Scheduler(config, make_policy("fcfs"))
        self.latency, self.cold_shapes, self.new_size_s = latency, cold_shapes, new_size_s
        self.now_s, self.steps = 0.0, itertools.count()
        self.seen: set[tuple[tuple[tuple[int, int], ...], int]] = set()
        self.sizes: set[int] = set()

    def add_request(self, request_id: str, prompt_tokens: int, max_tokens: int) -> None:
        request = make_request(request_id, prompt=prompt_tokens, output=max_tokens, arrival=self.now_s)
        assert self.scheduler.add_request(request, self.now_s).accepted

    def step(self) -> StepRecord | None:
        plan = self.scheduler.schedule(self.now_s)
        if plan.is_empty:
            return None
        composition = StepComposition(
            tuple((c.num_tokens, c.context_tokens) for c in plan.prefill),
            len(plan.decode),
            plan.decode_context_tokens,
        )
        time_s = self.latency.step_time_s(
            composition.prefill, composition.num_decode, composition.decode_context_tokens
        )
        shape = (composition.prefill, composition.num_decode)
        if self.cold_shapes and shape not in self.seen:
            time_s *= 20.0
        self.seen.add(shape)
        if composition.num_tokens not in self.sizes:
            time_s += self.new_size_s
        self.sizes.add(composition.num_tokens)
        self.now_s += time_s
        self.scheduler.update(plan, StepResult(end_time_s=self.now_s))
        return StepRecord(composition, time_s, time_s * 1.01, time_s)

    def abort(self, request_ids: Sequence[str]) -> None:
        for request_id in request_ids:
            self.scheduler.abort(request_id, self.now_s)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()


def test_pipeline_recovers_a_known_model_exactly() -> None:
    engine = settings_for(max_num_batched_tokens=512)
    steps = measure_grid(CoreEngine(engine, BatchLatencyModel(TRUE_CONFIG)), SMALL_GRID, engine)
    assert len(steps) == SMALL_GRID.num_measured_steps(512)
    model, report, all_steps = fit_steps(steps, name="fake")
    for name in ("t_c", "a_p", "b_p", "c_p", "a_d", "b_d"):
        assert getattr(model.config, name) == pytest.approx(getattr(TRUE_CONFIG, name), rel=1e-6), name
    assert report.mape < 1e-9 and all_steps.mape < 1e-9
    assert report.num_samples == len({step.key for step in steps}) == len(steps) // SMALL_GRID.repeats


@pytest.mark.parametrize("statistic", ["min", "median"])
def test_slow_first_repeats_do_not_reach_the_fit(statistic: Statistic) -> None:
    engine = settings_for(max_num_batched_tokens=512)
    grid = replace(SMALL_GRID, repeats=3)
    steps = measure_grid(CoreEngine(engine, BatchLatencyModel(TRUE_CONFIG), cold_shapes=True), grid, engine)
    assert max(s.record.execute_s for s in steps) > 10 * min(s.record.execute_s for s in steps)
    model, report, all_steps = fit_steps(steps, name="fake", statistic=statistic)
    assert model.config.t_c == pytest.approx(TRUE_CONFIG.t_c, rel=1e-6)
    assert report.max_ape < 1e-6 < 0.5 < all_steps.max_ape


@pytest.mark.parametrize("statistic", ["min", "median", "mean"])
def test_the_first_step_of_a_new_batch_size_is_measured_apart_from_the_fit(statistic: Statistic) -> None:
    engine = settings_for(max_num_batched_tokens=512)
    grid = replace(SMALL_GRID, repeats=3)
    fake = CoreEngine(engine, BatchLatencyModel(TRUE_CONFIG), new_size_s=0.004)
    steps = measure_grid(fake, grid, engine)
    firsts = [s for s in steps if s.first_shape]
    assert firsts and all(s.repeat == 0 for s in firsts)  # the grid's later rounds repeat its sizes
    sizes = [s.record.composition.num_tokens for s in firsts]
    assert len(sizes) == len(set(sizes))
    plain = {
        s.key: s.record.execute_s
        for s in measure_grid(CoreEngine(engine, BatchLatencyModel(TRUE_CONFIG)), grid, engine)
    }
    assert all(s.record.execute_s == pytest.approx(plain[s.key] + 0.004 * s.first_shape) for s in steps)
    model, report, _ = fit_steps(steps, name="fake", statistic=statistic)
    assert model.config.t_c == pytest.approx(TRUE_CONFIG.t_c, rel=1e-6) and report.max_ape < 1e-6
    assert new_shape_overhead_s(steps) == pytest.approx(0.004)
    assert new_shape_overhead_s([s for s in steps if not s.first_shape]) is None


class CountingEngine(CoreEngine):
    """A :class:`CoreEngine` that lists every request added (id, prompt tokens, max tokens) and aborted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.added: list[tuple[str, int, int]] = []
        self.aborted: list[str] = []

    def add_request(self, request_id: str, prompt_tokens: int, max_tokens: int) -> None:
        self.added.append((request_id, prompt_tokens, max_tokens))
        super().add_request(request_id, prompt_tokens, max_tokens)

    def abort(self, request_ids: Sequence[str]) -> None:
        self.aborted.extend(request_ids)
        super().abort(request_ids)


def test_intake_is_timed_between_decode_steps_and_every_request_is_aborted() -> None:
    engine = settings_for(max_num_batched_tokens=512)
    fake = CountingEngine(engine, BatchLatencyModel(TRUE_CONFIG))
    times = intake_times_s(fake, engine, 5)
    assert len(times) == 5 and all(t > 0 for t in times)
    decoders, timed = fake.added[:INTAKE_DECODES], fake.added[INTAKE_DECODES:]
    assert [(p, o) for _, p, o in timed] == [(256, 4)] * 5  # half the token budget, aborted before they run
    assert {rid for rid, _, _ in fake.added} == set(fake.aborted) and not fake.has_unfinished()
    assert all(o >= 5 for _, _, o in decoders)  # the decodes outlive the timed adds
    with pytest.raises(ValueError, match="num_requests: must be an integer >= 1"):
        intake_times_s(fake, engine, 0)


def test_wakeup_times_alternate_busy_and_idle_lone_requests() -> None:
    engine = settings_for(max_num_batched_tokens=512)
    fake = CountingEngine(engine, BatchLatencyModel(TRUE_CONFIG))
    busy, idle = wakeup_times_s(fake, 3, 200, idle_s=0.001)
    assert len(busy) == len(idle) == 3 and all(t > 0 for t in busy + idle)
    added = fake.added
    assert len(added) == 1 + 2 * 3 and {(p, o) for _, p, o in added} == {(200, 1)} and not fake.has_unfinished()
    assert len({rid for rid, _, _ in added}) == len(added)
    assert idle_wakeup_overhead_s([0.006, 0.004, 0.005], [0.007, 0.009]) == pytest.approx(0.003)
    assert idle_wakeup_overhead_s([0.006], [0.004]) == 0.0  # never negative
    assert idle_wakeup_overhead_s([], [0.004]) is None
    fake.add_request("left", 64, 4)
    with pytest.raises(ProfilingError, match="must be idle"):
        wakeup_times_s(fake, 1, 16)
    with pytest.raises(ValueError, match="trials: must be an integer >= 1"):
        wakeup_times_s(CoreEngine(engine, BatchLatencyModel(TRUE_CONFIG)), 0, 16)


def test_progress_counts_measured_steps() -> None:
    engine = settings_for(max_num_batched_tokens=512)
    calls: list[tuple[int, int]] = []
    measure_grid(
        CoreEngine(engine, BatchLatencyModel(TRUE_CONFIG)), SMALL_GRID, engine, lambda *a: calls.append(a)
    )
    total = SMALL_GRID.num_measured_steps(512)
    assert calls == [(done, total) for done in range(1, total + 1)]


class DroppingEngine(CoreEngine):
    """Loses one decode from the 5th step on, as if the engine had preempted a request."""

    def step(self) -> StepRecord | None:
        record = super().step()
        if record is not None and record.composition.num_decode and next(self.steps) > 5:
            c = record.composition
            return StepRecord(StepComposition(c.prefill, c.num_decode - 1, 0), 1.0, 1.0, 1.0)
        return record


def test_unexpected_composition_stops_the_run() -> None:
    engine = settings_for(max_num_batched_tokens=512)
    with pytest.raises(ProfilingError, match=r"D=\d+ C=\d+ .* expected .* beside \d+ decodes, the engine ran"):
        measure_grid(DroppingEngine(engine, BatchLatencyModel(TRUE_CONFIG)), SMALL_GRID, engine)


def test_a_grid_that_cannot_identify_the_model_says_so() -> None:
    engine = settings_for(max_num_batched_tokens=512)
    decode_free = ProfileGrid((0,), (64,), (16, 200, 700), repeats=1)
    steps = measure_grid(CoreEngine(engine, BatchLatencyModel(TRUE_CONFIG)), decode_free, engine)
    with pytest.raises(ProfilingError, match="cannot fit the batch model to this grid"):
        fit_steps(steps, name="fake")


def fake_result(engine: EngineSettings) -> ProfileResult:
    steps = measure_grid(CoreEngine(engine, BatchLatencyModel(TRUE_CONFIG)), SMALL_GRID, engine)
    model, report, all_steps = fit_steps(steps, name="fake-cpu")
    described = ProfiledEngine(
        "vllm",
        "0.32.0",
        engine.model,
        "cpu",
        "bfloat16",
        engine.block_size,
        engine.kv_blocks,
        engine.max_num_batched_tokens,
        engine.max_num_seqs,
        engine.max_model_len,
    )
    return ProfileResult(
        model, report, all_steps, described, engine, SMALL_GRID, "small", "execute", "min", tuple(steps), 1.0
    )


def test_result_saves_a_profile_loadable_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path / "profiles"))
    result = dataclasses.replace(
        fake_result(settings_for(max_num_batched_tokens=512)),
        wakeup_s=((0.006, 0.007, 0.005), (0.009, 0.008)),
        intake_s=(4e-4, 6e-4, 5e-4),
    )
    result.save(user_profile_path("fake-cpu"), command="semsched profile --model /models/tiny")
    assert load_profile("fake-cpu") == result.model
    info = load_profile_info("fake-cpu")
    assert info.overheads.idle_wakeup_s == pytest.approx(0.0085 - 0.006)  # median idle - median busy
    assert info.overheads.arrival_s == pytest.approx(5e-4)  # the median intake
    assert info.overheads.new_shape_s == result.new_shape_s
    assert info.engine == result.engine
    assert info.fit["statistic"] == "min" and info.fit["num_samples"] == result.report.num_samples
    assert "block_size 32" in info.description and "semsched profile" in info.source
    result.write_steps_csv(tmp_path / "steps.csv")
    rows = list(csv.DictReader((tmp_path / "steps.csv").open()))
    assert len(rows) == len(result.steps)
    assert sum(row["fit_sample"] == "True" for row in rows) == result.report.num_samples
    assert sum(row["first_shape"] == "True" for row in rows) == sum(s.first_shape for s in result.steps) > 0


# ---- real vLLM -------------------------------------------------------------------------------------------------
@pytest.fixture
def profile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path / "profiles"))
    yield tmp_path / "profiles"


@pytest.mark.vllm
@pytest.mark.slow
def test_profile_tiny_model_on_vllm(tiny_model_dir: Path, profile_dir: Path) -> None:
    engine = EngineSettings(
        model=str(tiny_model_dir), max_model_len=1024, max_num_seqs=4, max_num_batched_tokens=256
    )
    grid = ProfileGrid((0, 1, 3), (64, 400), (16, 100, 300), decode_steps=2, repeats=2)
    name = default_profile_name(str(tiny_model_dir))
    result = profile_vllm(engine, grid, name=name, grid_name="test", timing="iteration")
    # the driver checked every step's composition against the grid; the records must say so too
    assert len(result.steps) == grid.num_measured_steps(256)
    assert all(step.record.iteration_s >= step.record.execute_s > 0 for step in result.steps)
    assert result.engine.num_gpu_blocks == engine.kv_blocks and result.engine.block_size == 32
    assert result.engine.max_num_batched_tokens == 256 and result.engine.device == "cpu"
    # the report is computed from the fit samples (timings themselves are not asserted: the CPU is shared)
    assert math.isfinite(result.report.mape)
    assert result.report.mape == pytest.approx(evaluate(result.model, result.samples).mape)
    assert result.report.num_samples == len({step.key for step in result.steps})
    result.save(user_profile_path(name))
    assert load_profile(name) == result.model
    assert load_profile_info(name).fit["timing"] == "iteration"


@pytest.mark.vllm
@pytest.mark.slow
def test_profile_command_writes_a_profile_that_simulate_loads_by_name(
    tiny_model_dir: Path,
    profile_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "ERROR")  # the command sets it if unset; keep that from leaking
    sizes = ["--max-model-len", "1024", "--max-seqs", "4", "--max-batched-tokens", "256", "--repeats", "1"]
    argv = ["profile", "--model", str(tiny_model_dir), "--name", "tiny-cli", *sizes]
    assert main([*argv, "--steps-csv", str(tmp_path / "steps.csv")]) == 0
    out = capsys.readouterr().out
    assert "MAPE" in out and f"wrote {profile_dir / 'tiny-cli.yaml'}" in out
    assert "(overheads.idle_wakeup_s)" in out and "(overheads.arrival_s)" in out  # both were timed and printed
    assert "--profile tiny-cli --block-size 32 --gpu-blocks 128 --max-batched-tokens 256 --max-seqs 4" in out
    info = load_profile_info("tiny-cli")
    assert info.engine is not None and info.engine.max_model_len == 1024
    written = yaml.safe_load((profile_dir / "tiny-cli.yaml").read_text())["overheads"]
    assert {"arrival_s", "idle_wakeup_s"} <= set(written)  # the intake and waking from idle were timed
    assert (tmp_path / "steps.csv").read_text().count("\n") == 1 + int(info.fit["num_measured_steps"])
    assert main(["simulate", "--profile", "tiny-cli", "--policy", "fcfs", "--rate", "2", "--duration", "5"]) == 0


@pytest.mark.vllm
@pytest.mark.slow
def test_the_profiler_samples_greedily_as_the_replay_does(tiny_model_dir: Path) -> None:
    from semsched.calibrate.profiling import VllmEngine, _in_process_core
    from semsched.calibrate.replay import ReplayRequest, _sampling_params

    settings = EngineSettings(
        model=str(tiny_model_dir), max_model_len=256, max_num_seqs=2, max_num_batched_tokens=64
    )
    with VllmEngine(settings) as engine:
        engine.add_request("greedy", 8, 2)
        (request,) = _in_process_core(engine.llm).scheduler.requests.values()
        replayed = _sampling_params(ReplayRequest("r", 0.0, (11, 12), 2))
        assert request.sampling_params.temperature == replayed.temperature
        assert request.sampling_params.sampling_type == replayed.sampling_type


class _FakeLLMEngine:
    """Just what :class:`InProcessEngine` reads of an ``LLMEngine``; counts shutdowns and aborts."""

    def __init__(self, vocab_size: int = 1000, block_size: Any = 32) -> None:
        from types import SimpleNamespace

        self.shutdowns = 0
        self.aborted: list[str] = []
        self.vllm_config = SimpleNamespace(
            model_config=SimpleNamespace(
                get_vocab_size=lambda: vocab_size, dtype="torch.bfloat16", max_model_len=256
            ),
            cache_config=SimpleNamespace(block_size=block_size, num_gpu_blocks=64),
            scheduler_config=SimpleNamespace(max_num_batched_tokens=128, max_num_seqs=4),
        )
        self.engine_core = SimpleNamespace(shutdown=self._shutdown)

    def _shutdown(self) -> None:
        self.shutdowns += 1

    def abort_request(self, request_ids: list[str]) -> None:
        self.aborted += request_ids

    def has_unfinished_requests(self) -> bool:
        return not self.aborted


@pytest.mark.vllm
def test_in_process_engine_draws_seeded_prompts_and_shuts_down_once() -> None:
    from semsched.calibrate.profiling import FIRST_PROMPT_TOKEN_ID, InProcessEngine, ProfilingError

    settings = EngineSettings(model="tiny", max_model_len=256, seed=3)
    draws = []
    for _ in range(2):
        fake = _FakeLLMEngine(vocab_size=1000)
        with InProcessEngine(settings, fake) as engine:
            assert engine.profiled_engine.block_size == 32 and engine.profiled_engine.dtype == "bfloat16"
            draws.append(engine.prompt_token_ids(50))
            assert engine.has_unfinished()
            engine.abort(["a", "b"])
            assert fake.aborted == ["a", "b"] and not engine.has_unfinished()
        engine.close()  # again: nothing more happens
        assert fake.shutdowns == 1
        with pytest.raises(ProfilingError, match="the engine is closed"):
            engine.llm_engine  # noqa: B018
    assert draws[0] == draws[1]  # the same seed draws the same prompts
    assert len(draws[0]) == 50 and all(FIRST_PROMPT_TOKEN_ID <= t < 1000 for t in draws[0])


@pytest.mark.vllm
def test_in_process_engine_shuts_down_an_engine_it_cannot_describe() -> None:
    from semsched.calibrate.profiling import InProcessEngine

    fake = _FakeLLMEngine(block_size="not a number")
    with pytest.raises(ValueError, match="not a number"):
        InProcessEngine(EngineSettings(model="tiny", max_model_len=256), fake)
    assert fake.shutdowns == 1
