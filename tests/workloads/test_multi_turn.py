"""Prefix hashes in workloads (issue 32): ``mt-bench-turns`` (semsched/workloads/multi_turn.py), a Mooncake
trace's ``hash_ids``, and ``Workload.prefix_hashes`` carried to the requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from semsched.core.prefix import regroup_block_hashes
from semsched.core.scheduler import SchedulerConfig
from semsched.sim.runner import ClusterSpec, run_policy
from semsched.workloads import build_workload
from semsched.workloads.traces import TraceFormatError, read_mooncake_jsonl
from semsched.workloads.workload import Workload, WorkloadError

WriteFile = Callable[[str, str], Path]


def test_second_turns_share_their_first_turns_blocks() -> None:
    workload = build_workload("mt-bench-turns:think_s=0", rate_per_s=1.0, seed=3, num_requests=40)
    requests = workload.to_requests()
    assert all(r.prefix_hashes is not None for r in requests)
    firsts = {r.prefix_hashes[:4]: r for r in requests if r.prompt_tokens < 100 and r.prefix_hashes}
    shared = 0
    for request in requests:
        assert request.prefix_hashes is not None
        first = firsts.get(request.prefix_hashes[:4])
        if first is None or first is request or first.arrival_time_s >= request.arrival_time_s:
            continue
        # turn 2 holds turn 1's prompt and answer: every full block of them is a shared block
        assert first.prefix_hashes is not None
        blocks = (first.prompt_tokens + first.output_tokens) // 16
        assert request.prefix_hashes[:blocks] == first.prefix_hashes[:blocks]
        assert request.prompt_tokens > first.prompt_tokens + first.output_tokens
        shared += 1
    assert shared >= 5


def test_turn_two_arrives_after_turn_one_is_streamed() -> None:
    workload = build_workload("mt-bench-turns:think_s=0;token_s=0.5", rate_per_s=0.01, seed=0, num_requests=2)
    first, second = workload.to_requests()
    assert second.arrival_time_s - first.arrival_time_s == pytest.approx(0.5 * first.output_tokens)
    assert second.prompt_tokens > first.prompt_tokens + first.output_tokens


@pytest.mark.parametrize(("spec", "field"), [("think_s=-1", "think_s"), ("block_size=0", "block_size"),
                                             ("answers=/nonexistent.jsonl", "answers")])
def test_bad_parameters_name_the_field(spec: str, field: str) -> None:
    with pytest.raises(WorkloadError, match=field):
        build_workload(f"mt-bench-turns:{spec}", rate_per_s=1.0, seed=0, num_requests=4)


def test_mooncake_hash_ids_become_engine_block_hashes(write_file: WriteFile) -> None:
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [7, 8, 9]},
            {"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [7, 3]},
            {"timestamp": 20, "input_length": 50, "output_length": 5}]
    path = write_file("mc.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    workload, _ = read_mooncake_jsonl(path, prefix_block_size=32)
    assert workload.prefix_hashes is not None and workload.prefix_block_size == 32
    first, second, third = workload.prefix_hashes
    assert first == regroup_block_hashes([7, 8, 9], 1100, 32) and len(first) == 1100 // 32
    assert second is not None and second[:16] == first[:16] and second[16] != first[16]
    assert third is None
    requests = workload.to_requests()
    assert requests[1].prefix_hashes == second and requests[2].prefix_hashes is None


def test_mooncake_bad_hash_ids_name_the_line(write_file: WriteFile) -> None:
    path = write_file("bad.jsonl", json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1,
                                               "hash_ids": [1, "x"]}) + "\n")
    with pytest.raises(TraceFormatError, match="line 1: hash_ids"):
        read_mooncake_jsonl(path)


def test_workload_prefix_hashes_are_checked_and_carried() -> None:
    base = Workload.untiered("w", [0.0, 1.0], [10, 20], [1, 2])
    with pytest.raises(WorkloadError, match="prefix_hashes: has 1 entries"):
        base.with_prefix_hashes([(1,)])
    with pytest.raises(WorkloadError, match=r"prefix_hashes\[1\]\[0\]"):
        base.with_prefix_hashes([(1,), ("x",)])  # type: ignore[list-item]
    with pytest.raises(WorkloadError, match="prefix_block_size"):
        base.with_prefix_hashes([(1,), None], block_size=0)
    carried = base.with_prefix_hashes([(1, 2), None], block_size=8).head(1)
    assert carried.prefix_hashes == ((1, 2),) and carried.prefix_block_size == 8


def test_a_block_size_mismatch_is_refused_with_caching_on() -> None:
    workload = Workload.untiered("w", np.array([0.0]), [40], [2]).with_prefix_hashes([(1, 2)], block_size=8)
    cluster = ClusterSpec(scheduler=SchedulerConfig(block_size=16, enable_prefix_caching=True))
    with pytest.raises(ValueError, match="prefix_block_size"):
        run_policy(workload, "fcfs", cluster)
    run_policy(workload, "fcfs", ClusterSpec())  # caching off: the hashes are not read
