"""Prefix caching in the block manager and the scheduler (issue 32): shared blocks, LRU eviction, reference counts
under preemption, and checked runs whose requests share prefixes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semsched.core.kv import BlockManager
from semsched.core.plan import StepResult
from semsched.core.prefix import regroup_block_hashes, text_block_hashes, token_block_hashes
from semsched.core.request import InvalidRequestError, Request
from tests.support import check_kv, make_request, make_scheduler, run_checked

BLOCK = 4


def _hashes(tokens: list[int]) -> tuple[int, ...]:
    return token_block_hashes(tokens, BLOCK)


def _computed(kv: BlockManager, request: Request, tokens: int) -> None:
    """Allocate and compute ``tokens`` more tokens of ``request``, offering its full blocks to the cache."""
    assert kv.try_allocate(request, tokens)
    request.num_computed_tokens += tokens
    kv.offer_blocks(request)


# ---- hashes ------------------------------------------------------------------------------------------------
def test_token_hashes_are_chained_over_full_blocks() -> None:
    a = _hashes(list(range(10)))
    b = _hashes([*range(8), 99, 98, 97, 96])
    assert len(a) == 2 and len(b) == 3  # the partial block has no hash
    assert a == b[:2]
    assert _hashes([1, *range(1, 8)])[1] != a[1]  # a different first block changes every later hash


def test_text_and_regrouped_hashes() -> None:
    assert text_block_hashes("abcdefgh", 3) == text_block_hashes("abcdefgX", 3)[:2]
    assert len(text_block_hashes("abcdefgh", 3)) == 2
    one = regroup_block_hashes([7, 8], 1000, 16)
    two = regroup_block_hashes([7, 9], 1000, 16)
    assert len(one) == 1000 // 16 and one[:32] == two[:32] and one[32] != two[32]
    assert len(regroup_block_hashes([7], 1000, 16)) == 512 // 16  # only as far as the ids reach


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(InvalidRequestError, match="block_size"):
        token_block_hashes([1, 2], 0)
    with pytest.raises(InvalidRequestError, match=r"prefix_hashes\[1\]"):
        make_request(prefix_hashes=(1, "x"))
    with pytest.raises(InvalidRequestError, match="prefix_hashes"):
        make_request(prefix_hashes=5)


# ---- block manager -----------------------------------------------------------------------------------------
def test_a_matching_prefix_shares_the_cached_blocks() -> None:
    kv = BlockManager(16, BLOCK, enable_prefix_caching=True)
    tokens = list(range(14))
    first = make_request("a", prompt=14, prefix_hashes=_hashes(tokens))
    _computed(kv, first, 14)
    assert kv.num_cached_blocks == 3
    second = make_request("b", prompt=14, prefix_hashes=_hashes(tokens))
    assert kv.attach_prefix(second) == 3
    assert kv.block_table(second) == kv.block_table(first)[:3]
    hashes, refs, evictable = kv.cache_state()
    assert set(refs.values()) == {2} and not evictable
    assert kv.num_free_gpu_blocks == 16 - 4  # shared blocks count once


def test_the_last_token_is_always_left_to_compute() -> None:
    kv = BlockManager(16, BLOCK, enable_prefix_caching=True)
    tokens = list(range(12))
    first = make_request("a", prompt=12, prefix_hashes=_hashes(tokens))
    _computed(kv, first, 12)
    same = make_request("b", prompt=12, prefix_hashes=_hashes(tokens))
    assert kv.attach_prefix(same) == 2  # 3 blocks cached, but the 12th token must be computed


def test_released_blocks_stay_cached_and_count_as_free() -> None:
    kv = BlockManager(8, BLOCK, enable_prefix_caching=True)
    request = make_request("a", prompt=8, prefix_hashes=_hashes(list(range(8))))
    _computed(kv, request, 8)
    kv.free(request)
    assert kv.num_free_gpu_blocks == 8 and kv.num_cached_blocks == 2
    again = make_request("b", prompt=9, prefix_hashes=_hashes(list(range(8))))
    assert kv.attach_prefix(again) == 2
    assert kv.num_free_gpu_blocks == 6


def test_eviction_takes_the_least_recently_released_block_first() -> None:
    kv = BlockManager(4, BLOCK, enable_prefix_caching=True)
    old = make_request("old", prompt=4, prefix_hashes=_hashes([1, 1, 1, 1]))
    new = make_request("new", prompt=4, prefix_hashes=_hashes([2, 2, 2, 2]))
    for request in (old, new):
        _computed(kv, request, 4)
    kv.free(old)
    kv.free(new)
    filler = make_request("filler", prompt=12)
    assert kv.try_allocate(filler, 12)  # 2 free blocks plus one evicted: the old one
    assert kv.num_cached_blocks == 1
    assert kv.cached_prefix_blocks(make_request("x", prompt=5, prefix_hashes=new.prefix_hashes)) == 1
    assert kv.cached_prefix_blocks(make_request("y", prompt=5, prefix_hashes=old.prefix_hashes)) == 0


def test_without_prefix_caching_nothing_is_cached() -> None:
    kv = BlockManager(8, BLOCK)
    request = make_request("a", prompt=8, prefix_hashes=_hashes(list(range(8))))
    _computed(kv, request, 8)
    kv.free(request)
    assert kv.num_cached_blocks == 0
    assert kv.attach_prefix(make_request("b", prompt=9, prefix_hashes=request.prefix_hashes)) == 0


# ---- scheduler ---------------------------------------------------------------------------------------------
def _step(scheduler, now_s: float) -> float:  # type: ignore[no-untyped-def]
    plan = scheduler.schedule(now_s)
    check_kv(scheduler)
    scheduler.update(plan, StepResult(end_time_s=now_s + 0.01))
    check_kv(scheduler)
    return now_s + 0.01


def test_a_cached_prefix_skips_its_prefill() -> None:
    scheduler = make_scheduler(block_size=BLOCK, num_gpu_blocks=64, enable_prefix_caching=True)
    tokens = list(range(40))
    first = make_request("a", prompt=40, output=2, prefix_hashes=_hashes(tokens))
    scheduler.add_request(first, 0.0)
    now = 0.0
    while scheduler.has_unfinished():
        now = _step(scheduler, now)
    second = make_request("b", prompt=44, output=2, prefix_hashes=_hashes([*tokens, 5, 6, 7, 8]))
    scheduler.add_request(second, now)
    plan = scheduler.schedule(now)
    (chunk,) = plan.prefill
    assert chunk.context_tokens == 40 and chunk.num_tokens == 4  # only the uncached suffix is computed
    assert second.num_cached_tokens == 40 and first.num_cached_tokens == 0


def test_refcounts_survive_preemption_by_recompute() -> None:
    scheduler = make_scheduler("priority", block_size=BLOCK, num_gpu_blocks=24, enable_prefix_caching=True,
                               watermark=0.0)
    shared = _hashes(list(range(32)))
    # two long-output requests share a 32-token prefix and outgrow the cache together: one is preempted
    requests = [make_request(str(i), prompt=33, output=40, priority=i, prefix_hashes=shared) for i in range(2)]
    scheduler.add_request(requests[0], 0.0)
    now = _step(scheduler, 0.0)
    scheduler.add_request(requests[1], now)
    preempted = 0
    while scheduler.has_unfinished():
        plan = scheduler.schedule(now)
        check_kv(scheduler)
        preempted += len(plan.preempted)
        now += 0.01
        scheduler.update(plan, StepResult(end_time_s=now))
        check_kv(scheduler)
    assert preempted >= 1
    assert all(r.num_output_tokens == 40 for r in requests)
    assert requests[1].num_cached_tokens == 32


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["fcfs", "priority", "tiered"]), st.integers(0, 16))
def test_checked_runs_with_shared_prefixes(seed: int, policy: str, cpu_blocks: int) -> None:
    """Random requests drawn from a few shared prefixes: every step keeps the KV and cache invariants and
    every request finishes, with recompute and swap preemptions."""
    rng = np.random.default_rng(seed)
    prefixes = [list(rng.integers(0, 1000, 64)) for _ in range(3)]
    requests = []
    for i in range(40):
        prompt = int(rng.integers(1, 80))
        tokens = (prefixes[int(rng.integers(0, 3))] + list(rng.integers(0, 1000, 80)))[:prompt]
        output = int(rng.integers(1, 40))
        answer = list(rng.integers(0, 1000, output))
        requests.append(make_request(str(i), prompt=prompt, output=output, arrival=float(i) * 0.02,
                                     priority=int(rng.integers(0, 3)),
                                     prefix_hashes=_hashes(tokens + answer)))
    scheduler = make_scheduler(policy, block_size=BLOCK, num_gpu_blocks=48, num_cpu_blocks=cpu_blocks,
                               enable_prefix_caching=True, max_num_batched_tokens=64)
    run_checked(scheduler, requests)
    assert all(r.num_output_tokens == r.target_output_tokens for r in requests)


def test_swapping_out_a_sharer_releases_its_references_only() -> None:
    kv = BlockManager(16, BLOCK, num_cpu_blocks=8, enable_prefix_caching=True)
    tokens = list(range(16))
    owner = make_request("owner", prompt=16, prefix_hashes=_hashes(tokens))
    _computed(kv, owner, 16)
    sharer = make_request("sharer", prompt=18, prefix_hashes=_hashes(tokens))
    assert kv.attach_prefix(sharer) == 4
    sharer.num_computed_tokens = 16
    _computed(kv, sharer, 2)
    assert kv.swap_out(sharer) == 5  # its 4 shared blocks and 1 of its own are copied out
    _, refs, evictable = kv.cache_state()
    assert refs == {block: 1 for block in kv.block_table(owner)} and not evictable
    assert kv.num_free_gpu_blocks == 16 - 4
    assert kv.try_swap_in(sharer)  # back in fresh blocks of its own, none of them cached
    assert not set(kv.block_table(sharer)) & set(kv.block_table(owner))
    kv.free(owner)
    kv.free(sharer)
    hashes, refs, evictable = kv.cache_state()
    assert not refs and set(evictable) == set(hashes) and kv.num_free_gpu_blocks == 16
