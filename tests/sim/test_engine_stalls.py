"""Nothing is lost: an instance idle while it holds work it could run stops the run at that moment (or, with
``allow_stalls``, ends those requests STALLED, counted and shown); only a request that an idle engine provably
cannot take is dropped, with a reason that names the blocks."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from rich.console import Console

from semsched.cli import main
from semsched.core.kv import BlockManager
from semsched.core.policy import SchedulerView
from semsched.core.request import Request, RequestState
from semsched.core.scheduler import Scheduler, SchedulerConfig
from semsched.latency import load_profile
from semsched.metrics import summarize
from semsched.metrics.report import comparison_table, sweep_table
from semsched.policies.fcfs import FCFS
from semsched.sim import runner
from semsched.sim.engine import Instance, Simulation
from semsched.sim.executor import SimulationError
from semsched.sim.router import make_router
from tests.support import make_request


class _Strands(FCFS):
    """A defective policy: once a request runs, it is never given a step again."""

    name = "strands-running-work"

    def running_order(
        self, running: Sequence[Request], view: SchedulerView, now_s: float
    ) -> Sequence[Request]:
        return []


def _simulation(policy: FCFS, *, allow_stalls: bool = False, **config: object) -> Simulation:
    scheduler = Scheduler(SchedulerConfig(**config), policy)  # type: ignore[arg-type]
    instance = Instance(scheduler, load_profile("a100-qwen1.5-4b"))
    return Simulation([instance], make_router("round-robin"), allow_stalls=allow_stalls)


def _requests() -> list[Request]:
    return [make_request("early", prompt=64, output=20, arrival=0.0),
            make_request("late", prompt=64, output=20, arrival=100.0)]


def test_an_instance_left_idle_with_running_work_stops_the_run_when_it_goes_idle() -> None:
    with pytest.raises(SimulationError) as caught:
        _simulation(_Strands()).run(_requests())
    message = str(caught.value)
    assert "strands-running-work" in message
    assert "early (running" in message  # the request, and where it is
    assert "GPU blocks free" in message and "1 running" in message  # the engine's state
    assert "t=100" not in message  # found when it happened (the first step's end), not at the next arrival
    assert "--allow-stalls" in message


def test_with_allow_stalls_stranded_requests_end_stalled_and_are_counted_in_red() -> None:
    requests = _requests()
    simulation = _simulation(_Strands(), allow_stalls=True)
    simulation.run(requests)
    assert [r.state for r in requests] == [RequestState.STALLED, RequestState.STALLED]
    assert all(r.finish_reason is not None and r.finish_reason.startswith("stalled:") for r in requests)
    assert requests[0].finish_time_s is not None and requests[0].finish_time_s < 100.0
    assert simulation.num_stalled == 2
    summary = summarize(requests)
    assert summary.overall.num_stalled == 2
    assert summary.overall.rejections_by_reason == {"stalled": 2}
    console = Console(record=True, width=250)
    console.print(comparison_table({"strands": summary}))
    assert "stalled" in console.export_text(clear=False)
    html = console.export_html()
    assert "color: #800000" in html or "color: #ff0000" in html  # the count is red
    console.print(sweep_table({"strands": [(1.0, summary)]}, "ttft_mean"))
    assert "+2 stalled" in console.export_text()


def test_a_normal_run_shows_no_stalled_column() -> None:
    requests = _requests()
    _simulation(FCFS()).run(requests)
    assert all(r.state is RequestState.FINISHED for r in requests)
    console = Console(record=True, width=250)
    console.print(comparison_table({"fcfs": summarize(requests)}))
    assert "stalled" not in console.export_text()


def test_a_request_an_idle_engine_cannot_take_is_dropped_with_a_true_reason() -> None:
    """A request admitted although no idle engine could hold its first chunk (here: the capacity check is
    bypassed) is dropped when the engine goes idle, and the reason names the blocks; the others finish."""
    simulation = _simulation(FCFS(), num_gpu_blocks=16, block_size=16, max_num_batched_tokens=2048)
    scheduler = simulation.instances[0].scheduler
    too_big = make_request("too-big", prompt=1000, output=4, arrival=0.0)

    class _AdmitsTooBig(BlockManager):  # (a subclass: the compiled core's BlockManager takes no monkeypatch)
        def fits_ever(self, request: Request, extra_tokens: int = 0) -> bool:
            return request is too_big or super().fits_ever(request, extra_tokens)

    kv = scheduler.kv
    scheduler.kv = _AdmitsTooBig(kv.num_gpu_blocks, kv.block_size, num_cpu_blocks=kv.num_cpu_blocks,
                                 watermark=scheduler.config.watermark, reservations=kv.reservations)
    small = make_request("small", prompt=32, output=4, arrival=0.0)
    simulation.run([too_big, small])
    assert small.state is RequestState.FINISHED
    assert too_big.state is RequestState.DROPPED
    assert too_big.finish_reason is not None
    assert too_big.finish_reason.startswith("never schedulable: needs 63 KV blocks to start")


@pytest.mark.parametrize("allow", [False, True])
def test_the_cli_stops_at_a_stall_or_counts_it_in_red(
    allow: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "make_policy", lambda spec: _Strands())  # a defective fcfs, in the simulator only
    argv = ["simulate", "--policy", "fcfs", "--duration", "5", "--rate", "2", "--seed", "0"]
    code = main([*argv, "--allow-stalls"] if allow else argv)
    out, err = capsys.readouterr()
    if allow:
        assert code == 0
        assert "stalled:" in out and "strands" not in err
    else:
        assert code == 2
        assert err.startswith("error: stall: policy 'strands-running-work' left instance 0 idle")
        assert "--allow-stalls" in err
