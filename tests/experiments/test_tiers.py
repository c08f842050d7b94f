"""``semsched reproduce tiers`` (seed 003): its pieces on small grids; the whole --quick run is
tests/experiments/test_reproduce.py's."""

from __future__ import annotations

import numpy as np
import pytest

from semsched.core.request import RequestState
from semsched.experiments import ExperimentContext
from semsched.experiments.tiers import (
    BACKGROUND_PRIORITY,
    PAPER_COSTS,
    TABLE_POLICIES,
    Grid,
    _Base,
    _costs_figure,
    _table62_figure,
    at_rate,
    background_numbers,
    measure_capacity,
    targets_of,
)
from semsched.latency.preemption import KNOWN_SHAPES, PCIE4_X16_BYTES_PER_S, PreemptionCostModel
from semsched.latency.roofline import RooflineLatencyModel
from semsched.metrics import request_metrics
from semsched.sim.runner import ClusterSpec, run_policy
from semsched.workloads import build_workload


def test_quick_grid_is_one_seed_and_one_load() -> None:
    quick = Grid.of(ExperimentContext("tiers", quick=True, seed=7))
    full = Grid.of(ExperimentContext("tiers", quick=False, seed=7))
    assert quick.seeds == (7,) and quick.loads == (1.0,) and quick.num_requests < full.num_requests
    assert full.seeds == (7, 8, 9, 10, 11) and full.loads == (0.8, 1.0, 1.2)
    assert full.reserve_fractions[0] == 0.0 and full.reserve_fractions[-1] == 0.4


def test_at_rate_keeps_the_requests_and_sets_the_mean_rate() -> None:
    workload = build_workload("azure-conv", rate_per_s=1.0, num_requests=50, seed=0)
    faster = at_rate(workload, 4.0)
    assert faster.mean_rate() == pytest.approx(4.0, rel=1e-12)
    assert np.array_equal(faster.prompt_tokens, workload.prompt_tokens) and faster.tier == workload.tier


def test_capacity_is_completions_per_second_between_the_finish_quantiles() -> None:
    workload = build_workload("azure-conv", rate_per_s=1.0, num_requests=101, seed=0)
    capacity = measure_capacity(workload, "azure-conv", 0, ClusterSpec())
    burst = run_policy(at_rate(workload, 1000.0), "fcfs")
    finish = np.sort([r.finish_time_s for r in burst.requests if r.finish_time_s is not None])
    assert capacity.completions == 90 - 10
    assert capacity.requests_per_s == pytest.approx(80 / (finish[90] - finish[10]), rel=1e-12)


def test_targets_are_decided_on_the_raw_numbers() -> None:
    def numbers(attainment: float, p99: float, tokens: float, preemptions: float) -> dict[str, float | None]:
        return {
            "PREMIUM.slo_attainment": attainment,
            "PREMIUM.ttft_p99_s": p99,
            "output_tokens_per_s": tokens,
            "num_preemptions": preemptions,
        }

    ours = {
        "fcfs": numbers(0.1, 10.0, 100.0, 5),
        "priority-preempt": numbers(0.2, 2.0, 90.0, 0),
        "tiered": numbers(0.49, 1.0, 94.0, 0),
    }
    ceiling = {"tiered": numbers(0.5, 0.1, 10.0, 0)}
    attainment, ttft, tokens, preemptions = targets_of("tiered", ours, ceiling)
    assert attainment.ratio == pytest.approx(0.98) and attainment.met
    assert ttft.ratio == pytest.approx(10.0) and ttft.met
    assert tokens.ratio == pytest.approx(0.94) and tokens.met
    assert preemptions.ratio is None and preemptions.met  # 0 <= 0 / 10, though the ratio is undefined
    ours["tiered"] = numbers(0.4, 1.5, 93.0, 1)
    assert [t.met for t in targets_of("tiered", ours, ceiling)] == [False, False, False, False]


def test_cost_table_prices_from_the_shape_and_shows_the_seed_codes_numbers() -> None:
    figure = _costs_figure()
    costs = PreemptionCostModel(RooflineLatencyModel(), KNOWN_SHAPES["llama-3-70b"], PCIE4_X16_BYTES_PER_S)
    wide = RooflineLatencyModel(num_gpus=8)
    for ((prompt, generated), (_, paper_recompute_ms, _)), row in zip(
        PAPER_COSTS.items(), figure.ours.values(), strict=True
    ):
        context = prompt + generated
        assert row["swap_s"] == costs.swap_s(context) == pytest.approx(2 * context * 327_680 / 25e9)
        assert row["recompute_s"] == costs.recompute_s(context)
        assert row["recompute_wide_s"] == wide.prefill_time_s(context)
        assert row["drop_work_lost_s"] == costs.drop_s(prompt, generated)
        # the seed's code: 512 bytes x 80 layers per token over 32 Gb/s both ways, 10,000 prefill tokens/s
        assert row["seed_code_swap_s"] == pytest.approx(2 * context * 80 * 512 / 4e9)
        assert row["seed_code_recompute_s"] * 1000 == pytest.approx(paper_recompute_ms, abs=1.0)
        assert row["cheapest"] == "swap"
    assert "does not follow from its own code" in " ".join(figure.notes)


def test_background_waits_are_arrival_to_first_schedule() -> None:
    workload = build_workload("azure-conv:tier_weights=0/50/0/50", rate_per_s=8.0, num_requests=60, seed=1)
    run = run_policy(workload, "priority")
    mine = [r for r in run.requests if r.priority == BACKGROUND_PRIORITY]
    assert mine and all(r.state is RequestState.FINISHED for r in mine)
    waits = [r.first_scheduled_time_s - r.arrival_time_s for r in mine if r.first_scheduled_time_s is not None]
    last_arrival = max(r.arrival_time_s for r in run.requests)
    numbers = background_numbers(run)
    assert numbers["BACKGROUND.wait_max_s"] == pytest.approx(max(waits))
    assert numbers["BACKGROUND.wait_p50_s"] == pytest.approx(float(np.median(waits)))
    in_time = sum(r.finish_time_s is not None and r.finish_time_s <= last_arrival for r in mine) / len(mine)
    assert numbers["BACKGROUND.finished_in_arrivals"] == pytest.approx(in_time)


def test_table62_numbers_are_medians_of_the_runs_own_requests() -> None:
    ctx = ExperimentContext("tiers", quick=True, seed=3)
    base = _Base(ctx, Grid(num_requests=80, seeds=(3, 4), reserve_fractions=(0.0,), loads=(1.0,)), ClusterSpec())
    figure = _table62_figure(ctx, base)
    assert {(run.figure_id, run.policy) for run in ctx.runs} == {("table62", p) for p in TABLE_POLICIES}
    assert all(len(run.requests) == 80 for run in ctx.runs)
    for policy in TABLE_POLICIES:
        per_seed = []
        for run in (r for r in ctx.runs if r.policy == policy):
            ttft = [
                m.ttft_s
                for m in map(request_metrics, run.requests)
                if m.tier == "PREMIUM" and m.ttft_s is not None and m.finished
            ]
            per_seed.append(float(np.percentile(ttft, 99)))
        assert figure.ours["medians"][policy]["PREMIUM.ttft_p99_s"] == pytest.approx(float(np.median(per_seed)))
    assert figure.config["seeds"] == [3, 4] and figure.paper["PREMIUM p99 TTFT (ms), FIFO"] == 2100
