"""The simulator's monitoring record (semsched/sim/monitor.py): grid samples by their definition, preemptions
as the requests count them, the same record with and without fast-forward."""

from collections import Counter

import pytest

from semsched.core.plan import PreemptionMode
from semsched.core.policy import SchedulerView
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency import load_profile
from semsched.metrics.series import monitoring_series
from semsched.policies.priority_preempt import PriorityPreempt
from semsched.sim.engine import Instance, SimResult, Simulation
from semsched.sim.monitor import Monitor, MonitorLog, QueueSample
from semsched.sim.router import make_router
from tests.support import make_request, make_scheduler, random_requests, simulate

PREEMPTING = "priority-preempt:mode=swap"
TIGHT = {"num_gpu_blocks": 300, "num_cpu_blocks": 120, "block_size": 16}


def _waiting_at(requests: list[Request], time_s: float) -> dict[int, int]:
    """Waiting requests per priority at ``time_s`` by definition, for a run without preemptions or rejections:
    arrived at or before it and not yet scheduled at it (a request admitted at ``time_s`` no longer waits)."""
    counts = Counter(
        r.priority
        for r in requests
        if r.arrival_time_s <= time_s and (r.first_scheduled_time_s is None or r.first_scheduled_time_s > time_s)
    )
    return dict(sorted(counts.items()))


def _grid(log: MonitorLog) -> tuple[list[float], list[dict[int, int]]]:
    """Every grid point's time and waiting counts, each sample expanded into its points."""
    times, waiting = [], []
    for sample in log.queue_samples:
        first = round(sample.time_s / log.sample_interval_s)
        times += [(first + j) * log.sample_interval_s for j in range(sample.num_points)]
        waiting += [dict(sample.waiting_by_priority)] * sample.num_points
    return times, waiting


@pytest.fixture
def no_recount(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail if the monitor ever falls back to recounting the queues: its running counts must be exact."""

    def refuse(self: Monitor) -> None:
        raise AssertionError("the monitor's waiting counts drifted from the schedulers'")

    monkeypatch.setattr(Monitor, "_recount", refuse)


@pytest.fixture
def checked_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Check every sample's counts against the schedulers' queues, counted request by request."""
    original = Monitor._waiting_by_priority

    def checked(self: Monitor) -> dict[int, int]:
        counts = original(self)
        truth = Counter(r.priority for s in self._schedulers for r in s.waiting_requests())
        assert counts == dict(sorted(truth.items()))
        return counts

    monkeypatch.setattr(Monitor, "_waiting_by_priority", checked)


@pytest.mark.usefixtures("no_recount")
@pytest.mark.parametrize("fast_forward", [True, False])
def test_queue_samples_are_the_waiting_queue_at_each_grid_point(fast_forward: bool) -> None:
    requests = random_requests(3, 250, rate=14.0, num_priorities=4)
    instance = Instance(make_scheduler("priority", max_num_seqs=6), load_profile("a100-qwen1.5-4b"))
    simulation = Simulation([instance], make_router("round-robin"), fast_forward=fast_forward,
                            sample_interval_s=0.5)
    result = simulation.run(requests)
    log = result.monitor
    assert not log.preemptions and all(r.state is RequestState.FINISHED for r in requests)
    times, waiting = _grid(log)
    assert times == [k * 0.5 for k in range(int(result.end_time_s // 0.5) + 1)]
    assert waiting == [_waiting_at(requests, t) for t in times]
    assert max(sum(w.values()) for w in waiting) > 5  # a queue did build up
    assert len(log.queue_samples) < len(times)  # points in a row with one state are one sample
    assert log.end_time_s == result.end_time_s and log.sample_interval_s == 0.5


def _run(fast_forward: bool, policy: str = PREEMPTING, instances: int = 1, **config: object) -> SimResult:
    requests = random_requests(11, 300, rate=12.0, num_priorities=4, with_slos=True)
    return simulate(requests, policy, fast_forward=fast_forward, instances=instances,
                    router="least-outstanding", **{**TIGHT, **config})


@pytest.mark.usefixtures("checked_counts", "no_recount")
@pytest.mark.parametrize("fast_forward", [True, False])
def test_every_preemption_is_recorded_with_its_victim(fast_forward: bool) -> None:
    result = _run(fast_forward)
    log = result.monitor
    by_request = Counter(p.request_id for p in log.preemptions)
    assert by_request == Counter({r.request_id: r.num_preemptions for r in result.requests if r.num_preemptions})
    requests = {r.request_id: r for r in result.requests}
    for record in log.preemptions:
        assert (record.priority, record.tier) == (requests[record.request_id].priority,
                                                  requests[record.request_id].tier)
    modes = Counter(p.mode for p in log.preemptions)
    assert modes[PreemptionMode.SWAP] > 0 and modes[PreemptionMode.DROP] == 0
    assert [p.time_s for p in log.preemptions] == sorted(p.time_s for p in log.preemptions)


@pytest.mark.usefixtures("checked_counts")
def test_swap_levels_follow_swap_traffic_within_the_swap_space() -> None:
    log = _run(True).monitor
    assert log.num_swap_blocks == TIGHT["num_cpu_blocks"]
    levels = [s.swap_blocks_used for s in log.swap_levels]
    assert levels and max(levels) > 0
    assert all(0 <= used <= log.num_swap_blocks for used in levels)
    assert all(0 <= s.swap_blocks_used <= log.num_swap_blocks for s in log.queue_samples)
    assert log.queue_samples[-1].swap_blocks_used == 0  # everything finished: nothing left in swap


@pytest.mark.parametrize(
    ("policy", "instances"),
    [(PREEMPTING, 1), (PREEMPTING, 3), ("priority-preempt", 2), ("fcfs", 1)],
)
def test_fast_forward_and_per_iteration_record_the_same(policy: str, instances: int) -> None:
    fast, slow = (_run(ff, policy, instances) for ff in (True, False))
    assert fast.num_events < slow.num_events  # it did fast-forward
    assert fast.monitor == slow.monitor
    fast_rows = monitoring_series(fast.requests, fast.monitor, bin_s=5.0).rows()
    assert fast_rows == monitoring_series(slow.requests, slow.monitor, bin_s=5.0).rows()


class _DropOnSecondPreemption(PriorityPreempt):
    """priority-preempt that ends a victim (PreemptionMode.DROP) instead of preempting it a second time."""

    def preemption_mode(self, request: Request, view: SchedulerView) -> PreemptionMode:
        return PreemptionMode.DROP if request.num_preemptions >= 1 else PreemptionMode.RECOMPUTE


@pytest.mark.usefixtures("checked_counts", "no_recount")
def test_dropped_victims_are_recorded_and_never_counted_as_waiting() -> None:
    requests = random_requests(11, 300, rate=12.0, num_priorities=4)
    scheduler = Scheduler(SchedulerConfig(**TIGHT), _DropOnSecondPreemption())  # type: ignore[arg-type]
    instance = Instance(scheduler, load_profile("a100-qwen1.5-4b"))
    log = Simulation([instance], make_router("round-robin")).run(requests).monitor
    dropped = {r.request_id for r in requests if r.state is RequestState.DROPPED}
    assert dropped and {p.request_id for p in log.preemptions if p.mode is PreemptionMode.DROP} == dropped
    assert log.queue_samples[-1].waiting_by_priority == {}


@pytest.mark.usefixtures("checked_counts")
def test_rejections_count_the_same_in_both_modes() -> None:
    # (aging off: with aging and queue limits, tiered's runs differ between the modes themselves)
    fast, slow = (_run(ff, "tiered:aging_per_s=0;max_waiting=2/2/2/2") for ff in (True, False))
    rejected = [r for r in fast.requests if r.state is RequestState.REJECTED]
    assert rejected and all(r.finish_reason and r.finish_reason.startswith("queue full:") for r in rejected)
    fast_series, slow_series = (monitoring_series(run.requests, run.monitor, bin_s=5.0) for run in (fast, slow))
    assert fast_series.rejections == slow_series.rejections
    assert sum(fast_series.rejections["queue full"]) == len(rejected)
    assert fast_series.preemptions == slow_series.preemptions


def test_a_waiting_request_that_leaves_unseen_is_recounted() -> None:
    scheduler = make_scheduler("fcfs")
    monitor = Monitor([scheduler], sample_interval_s=1.0)
    for i, priority in enumerate([0, 2, 2]):
        request = make_request(str(i), priority=priority)
        scheduler.add_request(request, 0.0)
        monitor.enqueued(request)
    scheduler.abort("1", 0.0)  # no plan says so
    assert monitor.sample_before(2.5) == 3.0
    assert monitor.log.queue_samples == [QueueSample(0.0, {0: 1, 2: 1}, 0, num_points=3)]
    scheduler.abort("0", 2.5)
    assert monitor.finish(3.0).queue_samples[-1] == QueueSample(3.0, {2: 1}, 0, num_points=1)


def test_a_step_that_ends_very_late_costs_one_sample() -> None:
    monitor = Monitor([make_scheduler("fcfs")], sample_interval_s=1.0)
    assert monitor.sample_before(1e300) >= 1e300
    assert len(monitor.log.queue_samples) == 1 and monitor.log.queue_samples[0].num_points > 10**299


@pytest.mark.parametrize("interval", [0.1, 0.3, 1.0, 7.0])
def test_grid_points_are_before_the_event_that_samples_them(interval: float) -> None:
    monitor = Monitor([make_scheduler("fcfs")], sample_interval_s=interval)
    for now_s in (0.0, 0.3, 0.9, 2.1, 2.1, 6.9, 7.0, 7.0000001, 21.0):
        before = monitor.log.queue_samples[-1:]
        next_s = monitor.sample_before(now_s)
        assert next_s >= now_s and (next_s - interval < now_s)
        sampled = sum(s.num_points for s in monitor.log.queue_samples)
        assert sampled * interval == next_s or (before and sampled == round(next_s / interval))


def test_an_empty_run_samples_time_zero() -> None:
    result = simulate([], "fcfs")
    assert result.monitor.end_time_s == 0.0
    assert [s.time_s for s in result.monitor.queue_samples] == [0.0]
    assert result.monitor.preemptions == []


@pytest.mark.parametrize("interval", [0.0, -1.0, float("nan"), float("inf")])
def test_the_sample_interval_must_be_positive_and_finite(interval: float) -> None:
    instance = Instance(make_scheduler("fcfs"), load_profile("a100-qwen1.5-4b"))
    with pytest.raises(ValueError, match="sample_interval_s"):
        Simulation([instance], make_router("round-robin"), sample_interval_s=interval)


def test_a_sim_result_built_by_hand_has_an_empty_log() -> None:
    assert SimResult(requests=[], end_time_s=0.0, num_steps=0, num_events=0).monitor == MonitorLog(1.0)
