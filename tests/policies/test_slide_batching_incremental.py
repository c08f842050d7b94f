"""slide-batching's incremental plans (issue 29): the plan made on the running requests alone (no waiting request
can start) and the plan put together from the kept waiting columns are, step by step, the full plan made from
every request afresh."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from semsched.core.policy import SchedulerView
from semsched.core.request import Request
from semsched.policies.slide_batching import SlideBatching, SlidePlan, _WaitingStats
from semsched.policies.vllm_fcfs import is_waiting
from semsched.sim.runner import build_simulation
from tests.sim.test_stress import SCENARIOS, Scenario

CHECKED = ("burst-500", "tiny-kv", "kv-exhaustion", "sustained-stream")


def _same(plan: SlidePlan, full: SlidePlan) -> None:
    assert plan.chosen == full.chosen
    assert (plan.tokens, plan.budget_s, plan.estimated_s) == (full.tokens, full.budget_s, full.estimated_s)
    assert (plan.num_urgent, plan.num_normal) == (full.num_urgent, full.num_normal)
    assert [r.request_id for r in plan.running] == [r.request_id for r in full.running]
    ranked = [r.request_id for r in plan.ranked]  # the running requests' order (victims) is the full plan's
    assert ranked == sorted(ranked, key=full.rank.__getitem__)
    if plan.waiting is not None:
        assert [r.request_id for r in plan.waiting()] == [r.request_id for r in full.ranked if is_waiting(r)]


def _checking(compared: Counter[str]) -> Callable[[SlideBatching, float, SchedulerView], SlidePlan | None]:
    original = SlideBatching._running_plan

    def checked(self: SlideBatching, now_s: float, view: SchedulerView) -> SlidePlan | None:
        plan = original(self, now_s, view)
        if plan is not None:
            _same(plan, self._full_plan(now_s))
            compared["running only" if not plan.complete else "merged"] += 1
        return plan

    return checked


@pytest.mark.parametrize("spec", ["slide-batching", "slide-batching:phi=conservative;gamma=2",
                                  "slide-batching:order=density"])
def test_every_incremental_plan_is_the_full_plan(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    compared: Counter[str] = Counter()
    monkeypatch.setattr(SlideBatching, "_running_plan", _checking(compared))
    scenarios: list[Scenario] = [s for s in SCENARIOS if s.name in CHECKED]
    assert len(scenarios) == len(CHECKED)
    for scenario in scenarios:
        build_simulation(spec, scenario.cluster).run(scenario.requests())
    assert compared["merged"] > 0
    if spec != "slide-batching:phi=conservative;gamma=2":  # (the conservative φ always plans the whole queue)
        assert compared["running only"] > 0


def _count_deadline_free(compared: Counter[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Count the running-only plans made as deadline-free ones in ``compared["deadline free"]``."""
    original = SlideBatching._deadline_free_plan

    def counted(self: SlideBatching, *args: Any) -> SlidePlan | None:
        plan = original(self, *args)
        compared["deadline free"] += plan is not None
        return plan

    monkeypatch.setattr(SlideBatching, "_deadline_free_plan", counted)


def _without_deadlines(requests: list[Request]) -> list[Request]:
    """The requests without SLOs, but for one in five that keeps its first-token deadline alone (no deadline once
    it has a token) and one in 25 that keeps its TPOT SLO too (a deadline on every token)."""
    for index, request in enumerate(requests):
        request.ttft_slo_s = request.ttft_slo_s if index % 5 == 0 else None
        request.tpot_slo_s = request.tpot_slo_s if index % 25 == 0 else None
        request.e2e_slo_s = None
    return requests


@pytest.mark.parametrize("spec", ["slide-batching", "slide-batching:order=deadline;gamma=0",
                                  "slide-batching:max_budget_ms=30"])
def test_deadline_free_plans_are_the_full_plan(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without deadlines the running-only plan keeps its order while the running set stays: still the full plan
    made afresh at every step (and kept off when ``max_budget_ms`` bounds the steps)."""
    compared: Counter[str] = Counter()
    monkeypatch.setattr(SlideBatching, "_running_plan", _checking(compared))
    _count_deadline_free(compared, monkeypatch)
    for scenario in [s for s in SCENARIOS if s.name in CHECKED]:
        build_simulation(spec, scenario.cluster).run(_without_deadlines(scenario.requests()))
    assert compared["running only"] > 0
    assert (compared["deadline free"] > 0) == ("max_budget_ms" not in spec)


def _same_stats(stats: _WaitingStats, fresh: _WaitingStats) -> None:
    for field in dataclasses.fields(stats):
        kept, afresh = getattr(stats, field.name), getattr(fresh, field.name)
        if isinstance(kept, np.ndarray):
            assert kept.dtype == afresh.dtype and np.array_equal(kept, afresh, equal_nan=True), field.name
        else:
            assert kept == afresh, field.name


@pytest.mark.parametrize("name", ["kv-exhaustion", "kv-exhaustion-swap", "tiny-kv", "burst-500"])
def test_kept_waiting_entries_are_computed_afresh(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The waiting stats made from the entries kept since the requests began waiting (preempted ones joining
    again with new progress) are those made from entries all computed afresh."""
    original = _WaitingStats.of
    compared: Counter[str] = Counter()

    def checked(policy: SlideBatching, block_size: int) -> _WaitingStats:
        stats = original(policy, block_size)
        kept = policy._entries
        policy._entries = (block_size, {})
        _same_stats(stats, original(policy, block_size))
        policy._entries = kept
        compared["stats"] += 1
        compared["preempted"] += any(r.num_preemptions for r in stats.requests)
        return stats

    monkeypatch.setattr(_WaitingStats, "of", checked)
    scenario = next(s for s in SCENARIOS if s.name == name)
    build_simulation("slide-batching", scenario.cluster).run(scenario.requests())
    assert compared["stats"] > 0
    if name.startswith("kv-exhaustion"):
        assert compared["preempted"] > 0
