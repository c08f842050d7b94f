"""tests/support.py's ``check_kv`` (the KV check of ``run_checked`` and of every policy's step-by-step tests)
catches broken KV accounting, though it walks the requests for the CPU pool only every few calls while nothing is
swapped out: a block manager broken on purpose, one way per test, is caught in a checked run; the same run on
the real one passes.

The broken block managers reach into :class:`BlockManager`'s free lists and tables (the accounting they break);
they follow it if it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from semsched.core.kv import BlockManager
from semsched.core.request import Request
from semsched.core.scheduler import Scheduler
from tests.support import KV_WALK_EVERY, check_kv, make_request, make_scheduler, random_requests, run_checked


class _LeaksOnFinish(BlockManager):
    """``free`` keeps one request's GPU blocks: a leak that the counts alone never show."""

    def free(self, request: Request) -> int:
        return 0 if request.request_id == "3" else super().free(request)


class _HandsOutAHeldBlock(BlockManager):
    """Once, a request's new GPU block is one that another request holds (its own goes back to the free list):
    the counts still add up."""

    done = False

    def try_allocate(self, request: Request, num_new_tokens: int, *, admission: bool = False) -> bool:
        before = self.gpu_blocks_of(request)
        allocated = super().try_allocate(request, num_new_tokens, admission=admission)
        others = [t for rid, t in self._gpu_tables.items() if rid != request.request_id and t]
        if allocated and not self.done and self.gpu_blocks_of(request) > before and others:
            mine = self._gpu_tables[request.request_id]
            self._free_gpu.append(mine[-1])
            mine[-1] = others[0][0]
            self.done = True
        return allocated


class _LosesACpuBlock(BlockManager):
    """The first swap-out takes one CPU block more off the free list than it records."""

    done = False

    def swap_out(self, request: Request, num_blocks: int | None = None) -> int:
        moved = super().swap_out(request, num_blocks)
        if not self.done and self._free_cpu:
            self._free_cpu.pop()
            self.done = True
        return moved


class _FreesASwappedBlock(BlockManager):
    """The first swap-out puts one of the blocks it swapped out back on the CPU free list: held and free."""

    done = False

    def swap_out(self, request: Request, num_blocks: int | None = None) -> int:
        moved = super().swap_out(request, num_blocks)
        table = self._cpu_tables.get(request.request_id)
        if not self.done and table:
            self._free_cpu.append(table[0])
            self.done = True
        return moved


def _with_kv(scheduler: Scheduler, kind: type[BlockManager]) -> Scheduler:
    kv = scheduler.kv
    assert kv.watermark_blocks == 0  # (made with watermark=0.0: nothing to carry over)
    scheduler.kv = kind(kv.num_gpu_blocks, kv.block_size, num_cpu_blocks=kv.num_cpu_blocks,
                        reservations=kv.reservations, watermark=0.0)
    return scheduler


def _roomy() -> tuple[Scheduler, Sequence[Request]]:
    """Every request fits at once: nothing is preempted."""
    return make_scheduler("fcfs", block_size=4, num_gpu_blocks=2000, watermark=0.0), random_requests(1, 20)


def _swapping() -> tuple[Scheduler, Sequence[Request]]:
    """Later, more important requests displace running ones, which are swapped out to the CPU."""
    requests = [make_request(f"low{i}", prompt=40, output=30, priority=2) for i in range(4)]
    requests += [make_request(f"high{i}", prompt=40, output=10, priority=0, arrival=0.05) for i in range(4)]
    scheduler = make_scheduler("priority-preempt:mode=swap", block_size=4, num_gpu_blocks=50, num_cpu_blocks=200,
                               watermark=0.0)
    return scheduler, requests


CASES = [
    (_LeaksOnFinish, _roomy, "nothing left to do, yet"),
    (_HandsOutAHeldBlock, _roomy, "a GPU block is held twice"),
    (_LosesACpuBlock, _swapping, "CPU blocks held \\+ free != total"),
    (_FreesASwappedBlock, _swapping, "CPU block"),
]


@pytest.mark.parametrize(("broken", "setup", "message"), CASES, ids=[case[0].__name__ for case in CASES])
def test_a_checked_run_catches_broken_kv_accounting(
    broken: type[BlockManager], setup: Callable[[], tuple[Scheduler, Sequence[Request]]], message: str
) -> None:
    scheduler, requests = setup()
    run_checked(scheduler, requests)  # the real block manager passes
    if setup is _swapping:
        assert any(r.num_preemptions for r in requests)  # (the broken runs show that they were swaps)

    scheduler, requests = setup()
    with pytest.raises(AssertionError, match=message):
        run_checked(_with_kv(scheduler, broken), requests)


def test_a_block_both_swapped_and_free_is_caught_while_nothing_else_is_swapped() -> None:
    """The walk over the requests is made only every few calls while no CPU block is in use; a CPU block that
    one request holds and the free list also holds is caught within that many calls."""
    scheduler = _with_kv(make_scheduler("fcfs", block_size=4, num_gpu_blocks=100, num_cpu_blocks=10,
                                        watermark=0.0), _FreesASwappedBlock)
    request = make_request("r", prompt=8, output=4)
    scheduler.add_request(request, 0.0)
    scheduler.schedule(0.0)
    assert scheduler.kv.swap_out(request, 1) == 1  # one block out: the free list is full again
    assert scheduler.kv.num_free_cpu_blocks == scheduler.kv.num_cpu_blocks
    with pytest.raises(AssertionError, match="CPU block"):
        for _ in range(KV_WALK_EVERY):
            check_kv(scheduler)
    with pytest.raises(AssertionError, match="CPU block"):
        check_kv(scheduler, walk=True)

